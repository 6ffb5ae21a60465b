//! What a guardian reads in `/proc`, allocation-free: the processes it lists and the start of
//! a process's stat file.

use nix::libc;

/// `/proc/PID/stat`, NUL-terminated, written without allocating (in the guardian).
pub(super) fn stat_path(pid: i32) -> [u8; 32] {
    let mut path = [0u8; 32];
    path[..6].copy_from_slice(b"/proc/");
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (pid.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        path[6 + i] = digits[len - 1 - i];
    }
    path[6 + len..6 + len + 5].copy_from_slice(b"/stat");
    path
}

/// Calls `f` with the pid of every process `/proc` lists, until it returns false; without
/// allocating. False if `/proc` could not be read through.
///
/// # Safety
/// Only plain system calls; in the guardian's own process.
pub(super) unsafe fn each_process(mut f: impl FnMut(i32) -> bool) -> bool {
    // SAFETY: (the whole block) plain system calls on a directory and buffers of its own;
    // getdents64 writes at most `buf.len()` bytes of whole records.
    unsafe {
        let dir = libc::open(c"/proc".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
        if dir < 0 {
            return false;
        }
        #[repr(C, align(8))]
        struct Buf([u8; 4096]);
        let mut buf = Buf([0; 4096]);
        let mut read = true;
        'dir: loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, buf.0.as_mut_ptr(), buf.0.len());
            if n < 0 {
                read = false;
                break;
            }
            if n == 0 {
                break;
            }
            let mut at = 0usize;
            while at < n as usize {
                // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
                let record = &buf.0[at..n as usize];
                let len = u16::from_ne_bytes([record[16], record[17]]) as usize;
                if len == 0 {
                    break;
                }
                let name = &record[19..len];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                at += len;
                if let Some(pid) = parse_pid(name)
                    && !f(pid)
                {
                    break 'dir;
                }
            }
        }
        libc::close(dir);
        read
    }
}

/// A decimal process id, or `None` for any other name.
pub(super) fn parse_pid(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 10 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = name.iter().fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    i32::try_from(n).ok()
}

/// Reads the start of the file at `path` (NUL-terminated) into `buf`: how many bytes came.
///
/// # Safety
/// Only plain system calls; `path` must be NUL-terminated.
pub(super) unsafe fn read_small(path: *const libc::c_char, buf: &mut [u8; 512]) -> Option<usize> {
    // SAFETY: the caller's NUL-terminated path; the buffer outlives the read.
    let n = unsafe {
        let fd = libc::open(path, libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    usize::try_from(n).ok()
}

/// Whether `/proc` is this process's own PID namespace's: `/proc/self/stat` names its pid.
///
/// # Safety
/// Only plain system calls.
pub(super) unsafe fn proc_is_ours() -> bool {
    let mut buf = [0u8; 512];
    // SAFETY: a NUL-terminated literal.
    let Some(n) = (unsafe { read_small(c"/proc/self/stat".as_ptr(), &mut buf) }) else { return false };
    let first = buf[..n].split(|&b| b == b' ').next().unwrap_or_default();
    // SAFETY: getpid cannot fail.
    parse_pid(first) == Some(unsafe { libc::getpid() })
}
