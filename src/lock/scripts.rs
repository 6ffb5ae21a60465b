//! The Lua scripts (`lua/*.lua`, each with its KEYS/ARGV contract and replies at the top): each
//! lock operation is one round trip, and keys and values travel only as KEYS/ARGV, never
//! spliced into script text. A script is its helper files and its own file, concatenated (the
//! `-- uses:` line names the helpers; `.ci/run` lints each script so). A call sends EVALSHA and
//! loads the script once on NOSCRIPT (e.g. after `SCRIPT FLUSH` or a restart). Each script's
//! SHA-1 is worked out when the binary is compiled, not at every start.

use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind, ToRedisArgs};

/// A script from its helper files and its own file under `lua/`, in that order.
macro_rules! lua {
    ($($file:literal),+) => {
        Lua::new(concat!($(include_str!(concat!("lua/", $file))),+))
    };
}

/// A Lua script and its SHA-1, both fixed at compile time.
pub struct Lua {
    code: &'static str,
    /// Lowercase hex, as Redis writes it.
    hash: [u8; 40],
}

impl Lua {
    const fn new(code: &'static str) -> Lua {
        let digest = const_sha1::sha1(code.as_bytes()).as_bytes();
        let mut hash = [0u8; 40];
        let mut i = 0;
        while i < 20 {
            hash[2 * i] = HEX[(digest[i] >> 4) as usize];
            hash[2 * i + 1] = HEX[(digest[i] & 0xf) as usize];
            i += 1;
        }
        Lua { code, hash }
    }

    /// A call of this script, to which keys and arguments are added in order.
    pub fn prepare_invoke(&'static self) -> LuaCall {
        LuaCall { script: self, keys: Vec::new(), args: Vec::new() }
    }

    /// A call whose first key is `key`.
    pub fn key<T: ToRedisArgs>(&'static self, key: T) -> LuaCall {
        let mut call = self.prepare_invoke();
        call.key(key);
        call
    }

    /// The SHA-1 Redis knows the script by.
    pub fn hash(&self) -> &str {
        std::str::from_utf8(&self.hash).expect("hex digits")
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// How many times one call loads its script again after NOSCRIPT.
const LOADS: u32 = 3;

/// What a lean script answers when the call is not of its shape: nothing done, ask the full one.
pub const NOT_MINE: i64 = 4;

/// A call of the full script, and of the lean one for its common shape when it fits (tried
/// first; the full one runs only when the lean one answers `{NOT_MINE}`).
pub struct Call {
    pub lean: Option<LuaCall>,
    pub full: LuaCall,
}

/// One call of a script: its keys and arguments.
pub struct LuaCall {
    script: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl LuaCall {
    pub fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    fn eval_cmd(&self, command: &str) -> Cmd {
        let mut cmd = redis::cmd(command);
        cmd.arg(self.script.hash()).arg(self.keys.len()).arg(&*self.keys).arg(&*self.args);
        cmd
    }

    fn load_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.script.code);
        cmd
    }

    /// EVALSHA (with `read_only`, EVALSHA_RO: a write fails, and Redis 7.0 and later run it
    /// even while their writes are paused); on NOSCRIPT, SCRIPT LOAD and the call again, a few
    /// times: someone may flush the scripts between the load and the call. (A Cluster sends
    /// SCRIPT LOAD to every master.) A NOSCRIPT after that is a transient fault
    /// (`Fault::from_redis`), retried as such.
    pub async fn invoke_async<T: FromRedisValue>(
        &self,
        con: &mut impl redis::aio::ConnectionLike,
        read_only: bool,
    ) -> RedisResult<T> {
        let command = if read_only { "EVALSHA_RO" } else { "EVALSHA" };
        let eval = self.eval_cmd(command);
        let mut loads = 0;
        loop {
            match eval.query_async(con).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) && loads < LOADS => {
                    loads += 1;
                    let () = self.load_cmd().exec_async(con).await?;
                }
                result => return result,
            }
        }
    }

    /// The same, on a blocking connection (tests).
    #[cfg(test)]
    pub fn invoke<T: FromRedisValue>(&self, con: &mut dyn redis::ConnectionLike) -> RedisResult<T> {
        let eval = self.eval_cmd("EVALSHA");
        match eval.query(con) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load_cmd().exec(con)?;
                eval.query(con)
            }
            result => result,
        }
    }
}

/// Takes every key or none, or queues for them.
pub static ACQUIRE: Lua = lua!("fence.lua", "queue.lua", "holders.lua", "acquire.lua");

/// [`ACQUIRE`] for one exclusive key, a run that does not queue, no success record.
pub static ACQUIRE_ONE: Lua = lua!("acquire_one.lua");

/// [`RENEW`] for one exclusive key.
pub static RENEW_ONE: Lua = lua!("renew_one.lua");

/// [`RELEASE`] for one exclusive key, nothing kept, no record, one Redis.
pub static RELEASE_ONE: Lua = lua!("release_one.lua");

/// Extends the lease on every key still ours.
pub static RENEW: Lua = lua!("queue.lua", "holders.lua", "renew.lua");

/// Whether every key still holds this run's value; writes nothing.
pub static HELD: Lua = lua!("queue.lua", "held.lua");

/// Deletes every key still ours, hands the lock over or wakes waiters.
pub static RELEASE: Lua = lua!("fence.lua", "queue.lua", "holders.lua", "release.lua");

/// A waiter gives up its places in the queues.
pub static LEAVE: Lua = lua!("queue.lua", "leave.lua");

/// The operator's snapshot of one key.
pub static STATUS: Lua = lua!("queue.lua", "status.lua");

/// The operator's override.
pub static FORCE_RELEASE: Lua = lua!("queue.lua", "holders.lua", "force_release.lua");

/// Redlock: raises a node's fence counters.
pub static RAISE_FENCE: Lua = lua!("fence.lua", "raise_fence.lua");

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [(&str, &Lua); 11] = [
        ("acquire", &ACQUIRE),
        ("acquire_one", &ACQUIRE_ONE),
        ("renew", &RENEW),
        ("renew_one", &RENEW_ONE),
        ("held", &HELD),
        ("release", &RELEASE),
        ("release_one", &RELEASE_ONE),
        ("leave", &LEAVE),
        ("status", &STATUS),
        ("force_release", &FORCE_RELEASE),
        ("raise_fence", &RAISE_FENCE),
    ];

    /// Each script is what its file's `-- uses:` line says (the helpers, then the file), which
    /// is how `.ci/run` puts it together for luacheck; every file is some script's.
    #[test]
    fn each_script_is_its_helpers_and_its_file() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lock/lua");
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).expect(name);
        let mut used = std::collections::BTreeSet::new();
        for (name, script) in ALL {
            let file = format!("{name}.lua");
            let own = read(&file);
            let uses: Vec<&str> = own
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("-- uses: "))
                .map_or(Vec::new(), |l| l.split(' ').collect());
            let code: String = uses.iter().map(|u| read(u)).chain([own.clone()]).collect();
            assert_eq!(code, script.code, "{file}: its `-- uses:` line and its lua! call differ");
            used.extend(uses.iter().map(|u| u.to_string()));
            used.insert(file);
        }
        let files: std::collections::BTreeSet<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(files, used, "a file under src/lock/lua that no script uses");
    }

    /// The hashes worked out at compile time are those Redis gives each script.
    #[test]
    fn compile_time_hashes_are_the_scripts_sha1() {
        for (_, script) in ALL {
            assert_eq!(script.hash(), redis::Script::new(script.code).get_hash());
        }
        assert_eq!(
            Lua::new("return 1").hash(),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
            "SHA-1 of 'return 1' as `redis-cli SCRIPT LOAD` prints it"
        );
    }
}
