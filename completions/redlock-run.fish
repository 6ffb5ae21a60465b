# fish completion for redlock-run
# Generated from the command-line definition (src/cli.rs) by `redlock-run --generate`; do not edit.

# Whether $argv[2] is an option of $argv[1] (empty: the wrapper) that takes the next word as
# its value.
function __redlock_run_takes_value
    switch "$argv[1]"
        case ''
            contains -- $argv[2] -k --key -t --ttl --busy-exit-code --limit --min-hold --idempotency-key --idempotency-ttl --note -w --wait --jitter --renew-every --kill-grace --on-lost --max-runtime --redis-url --password-file --tls-ca-file --tls-cert-file --tls-key-file --sentinel --sentinel-master --sentinel-password-file --connect-timeout --command-timeout --metrics-file --log-format --generate
            and return 0
            string match -rq -- '^-[vqhV]*[ktw]$' $argv[2]
            return
        case 'status'
            contains -- $argv[2] -k --key --redis-url --password-file --tls-ca-file --tls-cert-file --tls-key-file --sentinel --sentinel-master --sentinel-password-file --connect-timeout --command-timeout --log-format
            and return 0
            string match -rq -- '^-[vqh]*[k]$' $argv[2]
            return
        case 'release'
            contains -- $argv[2] -k --key --holder --redis-url --password-file --tls-ca-file --tls-cert-file --tls-key-file --sentinel --sentinel-master --sentinel-password-file --connect-timeout --command-timeout --log-format
            and return 0
            string match -rq -- '^-[vqh]*[k]$' $argv[2]
            return
        case 'lock'
            contains -- $argv[2] -k --key -t --ttl --busy-exit-code --limit --min-hold --idempotency-key --idempotency-ttl --note -w --wait --jitter --renew-every --kill-grace --on-lost --max-runtime --redis-url --password-file --tls-ca-file --tls-cert-file --tls-key-file --sentinel --sentinel-master --sentinel-password-file --connect-timeout --command-timeout --metrics-file --log-format
            and return 0
            string match -rq -- '^-[vqh]*[ktw]$' $argv[2]
            return
        case 'unlock'
            contains -- $argv[2] --log-format
            and return 0
            string match -rq -- '^-[vqh]*[]$' $argv[2]
            return
    end
    return 1
end

# Where the words before the cursor leave us: "top" (the wrapper's options), the name of a
# subcommand, or "command" followed by the command's words so far.
function __redlock_run_state
    set -l words (commandline -opc)
    set -e words[1]
    set -l sub
    set -l first 1
    while set -q words[1]
        set -l word $words[1]
        set -e words[1]
        if test "$word" = --
            # After a subcommand's options nothing may follow.
            if test -n "$sub"
                echo none
                return
            end
            echo command
            set -q words[1]
            and printf '%s\n' $words
            return
        else if __redlock_run_takes_value "$sub" $word
            set -e words[1]
        else if string match -q -- '-*' $word
        else if test -z "$sub" -a $first = 1; and contains -- $word status release lock unlock
            set sub $word
        else if test -z "$sub"
            echo command
            printf '%s\n' $word $words
            return
        end
        set first 0
    end
    if test -n "$sub"
        echo $sub
    else
        echo top
    end
end

function __redlock_run_at
    test (__redlock_run_state)[1] = $argv[1]
end

# The first word: a subcommand or the command.
function __redlock_run_first_word
    test (count (commandline -opc)) = 1
end

# The command's own words, completed as that command's.
function __redlock_run_command
    set -l words (__redlock_run_state)
    set -e words[1]
    set -l current (commandline -ct)
    if set -q words[1]
        complete -C (string join ' ' -- (string escape -- $words) $current)
    else
        __redlock_run_programs
    end
end

# Programs and paths: the wrapper runs a program, never a fish builtin or function.
function __redlock_run_programs
    set -l token (commandline -ct)
    # No program's name starts with '-' (and `complete -C` would read it as an option).
    string match -q -- '-*' $token
    and return
    set -l inner (builtin -n) (functions -an)
    for line in (complete -C "$token")
        set -l name (string split -m1 \t -- $line)[1]
        if not contains -- $name $inner; or command -q -- $name
            echo $line
        end
    end
end

complete -c redlock-run -f
complete -c redlock-run -n '__redlock_run_at command' -xa '(__redlock_run_command)'
complete -c redlock-run -n '__redlock_run_at top' -xa '(__redlock_run_programs)'
complete -c redlock-run -n '__redlock_run_first_word' -xa status -d 'Show who holds the lock; exit 0 when held, 1 when free'
complete -c redlock-run -n '__redlock_run_first_word' -xa release -d 'Delete a stuck lock (operator override)'
complete -c redlock-run -n '__redlock_run_first_word' -xa lock -d 'Hold the lock for the rest of a shell script'
complete -c redlock-run -n '__redlock_run_first_word' -xa unlock -d 'Release the lock taken by lock in this script'
complete -c redlock-run -n '__redlock_run_at top' -s k -l key -d 'Lock key; repeat to hold several, all or none' -x
complete -c redlock-run -n '__redlock_run_at top' -s t -l ttl -d 'Lease length: how long the lock lives unrenewed' -x
complete -c redlock-run -n '__redlock_run_at top' -l busy-exit-code -d 'Exit status when the lock is busy (like flock -E)' -x
complete -c redlock-run -n '__redlock_run_at top' -l limit -d 'Admit up to N holders at once (a semaphore)' -x
complete -c redlock-run -n '__redlock_run_at top' -l shared -d 'Hold the lock shared: beside other shared runs'
complete -c redlock-run -n '__redlock_run_at top' -l min-hold -d 'Hold the lock at least this long' -x
complete -c redlock-run -n '__redlock_run_at top' -l idempotency-key -d 'Succeed at most once per ID' -x
complete -c redlock-run -n '__redlock_run_at top' -l idempotency-ttl -d 'How long a success record is kept' -x
complete -c redlock-run -n '__redlock_run_at top' -l note -d 'A label stored with the holder (a job\'s URL)' -x
complete -c redlock-run -n '__redlock_run_at top' -s w -l wait -d 'How long to wait for a busy lock; 0 = fail at once' -x
complete -c redlock-run -n '__redlock_run_at top' -l jitter -d 'Sleep a random part of DUR before the first attempt' -x
complete -c redlock-run -n '__redlock_run_at top' -l fail-open -d 'Run without a lock if Redis is unreachable'
complete -c redlock-run -n '__redlock_run_at top' -l renew-every -d 'Renewal period' -x
complete -c redlock-run -n '__redlock_run_at top' -l kill-grace -d 'Time between SIGTERM and SIGKILL' -x
complete -c redlock-run -n '__redlock_run_at top' -l on-lost -d 'What to do when the lock is lost' -xa "terminate\t'Stop the command (SIGTERM, then SIGKILL) before the lock can expire under it; exit 125'
ignore\t'Keep the command running without the lock, warn loudly, exit with the command\'s status'"
complete -c redlock-run -n '__redlock_run_at top' -l max-runtime -d 'Stop the command after this long (exit 124)' -x
complete -c redlock-run -n '__redlock_run_at top' -l no-new-privs -d 'Keep the command from gaining privileges'
complete -c redlock-run -n '__redlock_run_at top' -l redis-url -d 'Redis URL (redis://, rediss://, unix://)' -x
complete -c redlock-run -n '__redlock_run_at top' -l password-file -d 'Read the Redis password from this file' -rF
complete -c redlock-run -n '__redlock_run_at top' -l tls-ca-file -d 'CA certificates (PEM) to verify with' -rF
complete -c redlock-run -n '__redlock_run_at top' -l tls-cert-file -d 'Client certificate (PEM) for mutual TLS' -rF
complete -c redlock-run -n '__redlock_run_at top' -l tls-key-file -d 'Client private key (PEM) for mutual TLS' -rF
complete -c redlock-run -n '__redlock_run_at top' -l tls-insecure -d 'Do not verify the server\'s certificate'
complete -c redlock-run -n '__redlock_run_at top' -l sentinel -d 'Find the master through this Sentinel' -x
complete -c redlock-run -n '__redlock_run_at top' -l sentinel-master -d 'Name of the master the Sentinels watch' -x
complete -c redlock-run -n '__redlock_run_at top' -l sentinel-password-file -d 'The Sentinels\' password, from a file' -rF
complete -c redlock-run -n '__redlock_run_at top' -l cluster -d 'Talk to a Redis Cluster'
complete -c redlock-run -n '__redlock_run_at top' -l connect-timeout -d 'Bound on connecting to Redis' -x
complete -c redlock-run -n '__redlock_run_at top' -l command-timeout -d 'Bound on each Redis request' -x
complete -c redlock-run -n '__redlock_run_at top' -l metrics-file -d 'Write Prometheus metrics to PATH at exit' -rF
complete -c redlock-run -n '__redlock_run_at top' -s v -l verbose -d 'More diagnostics (-v: info, -vv: debug)'
complete -c redlock-run -n '__redlock_run_at top' -s q -l quiet -d 'Only errors on stderr'
complete -c redlock-run -n '__redlock_run_at top' -l log-format -d 'Format of the diagnostics on stderr' -xa "text\t'redlock-run: level: message field=value …'
json\t'One JSON object per line, for log collectors (Kubernetes)'"
complete -c redlock-run -n '__redlock_run_at top' -l generate -d 'Print a man page or a completion script, and exit' -xa "man\t'The man page redlock-run(1)'
man-status\t'The man page redlock-run-status(1)'
man-release\t'The man page redlock-run-release(1)'
man-lock\t'The man page redlock-run-lock(1)'
man-unlock\t'The man page redlock-run-unlock(1)'
bash\t'Completion for bash'
zsh\t'Completion for zsh (a file named _redlock-run in fpath)'
fish\t'Completion for fish'
elvish\t'Completion for elvish'
powershell\t'Completion for PowerShell'"
complete -c redlock-run -n '__redlock_run_at top' -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n '__redlock_run_at top' -s V -l version -d 'Print version'
complete -c redlock-run -n '__redlock_run_at status' -s k -l key -d 'Lock key; repeat to hold several, all or none' -x
complete -c redlock-run -n '__redlock_run_at status' -l json -d 'Print one JSON object instead of text'
complete -c redlock-run -n '__redlock_run_at status' -l redis-url -d 'Redis URL (redis://, rediss://, unix://)' -x
complete -c redlock-run -n '__redlock_run_at status' -l password-file -d 'Read the Redis password from this file' -rF
complete -c redlock-run -n '__redlock_run_at status' -l tls-ca-file -d 'CA certificates (PEM) to verify with' -rF
complete -c redlock-run -n '__redlock_run_at status' -l tls-cert-file -d 'Client certificate (PEM) for mutual TLS' -rF
complete -c redlock-run -n '__redlock_run_at status' -l tls-key-file -d 'Client private key (PEM) for mutual TLS' -rF
complete -c redlock-run -n '__redlock_run_at status' -l tls-insecure -d 'Do not verify the server\'s certificate'
complete -c redlock-run -n '__redlock_run_at status' -l sentinel -d 'Find the master through this Sentinel' -x
complete -c redlock-run -n '__redlock_run_at status' -l sentinel-master -d 'Name of the master the Sentinels watch' -x
complete -c redlock-run -n '__redlock_run_at status' -l sentinel-password-file -d 'The Sentinels\' password, from a file' -rF
complete -c redlock-run -n '__redlock_run_at status' -l cluster -d 'Talk to a Redis Cluster'
complete -c redlock-run -n '__redlock_run_at status' -l connect-timeout -d 'Bound on connecting to Redis' -x
complete -c redlock-run -n '__redlock_run_at status' -l command-timeout -d 'Bound on each Redis request' -x
complete -c redlock-run -n '__redlock_run_at status' -s v -l verbose -d 'More diagnostics (-v: info, -vv: debug)'
complete -c redlock-run -n '__redlock_run_at status' -s q -l quiet -d 'Only errors on stderr'
complete -c redlock-run -n '__redlock_run_at status' -l log-format -d 'Format of the diagnostics on stderr' -xa "text\t'redlock-run: level: message field=value …'
json\t'One JSON object per line, for log collectors (Kubernetes)'"
complete -c redlock-run -n '__redlock_run_at status' -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n '__redlock_run_at release' -s k -l key -d 'Lock key; repeat to hold several, all or none' -x
complete -c redlock-run -n '__redlock_run_at release' -l force -d 'Required: a forced release can let two runs overlap'
complete -c redlock-run -n '__redlock_run_at release' -l holder -d 'Drop only the holder whose token starts with this' -x
complete -c redlock-run -n '__redlock_run_at release' -l json -d 'Print one JSON object instead of text'
complete -c redlock-run -n '__redlock_run_at release' -l redis-url -d 'Redis URL (redis://, rediss://, unix://)' -x
complete -c redlock-run -n '__redlock_run_at release' -l password-file -d 'Read the Redis password from this file' -rF
complete -c redlock-run -n '__redlock_run_at release' -l tls-ca-file -d 'CA certificates (PEM) to verify with' -rF
complete -c redlock-run -n '__redlock_run_at release' -l tls-cert-file -d 'Client certificate (PEM) for mutual TLS' -rF
complete -c redlock-run -n '__redlock_run_at release' -l tls-key-file -d 'Client private key (PEM) for mutual TLS' -rF
complete -c redlock-run -n '__redlock_run_at release' -l tls-insecure -d 'Do not verify the server\'s certificate'
complete -c redlock-run -n '__redlock_run_at release' -l sentinel -d 'Find the master through this Sentinel' -x
complete -c redlock-run -n '__redlock_run_at release' -l sentinel-master -d 'Name of the master the Sentinels watch' -x
complete -c redlock-run -n '__redlock_run_at release' -l sentinel-password-file -d 'The Sentinels\' password, from a file' -rF
complete -c redlock-run -n '__redlock_run_at release' -l cluster -d 'Talk to a Redis Cluster'
complete -c redlock-run -n '__redlock_run_at release' -l connect-timeout -d 'Bound on connecting to Redis' -x
complete -c redlock-run -n '__redlock_run_at release' -l command-timeout -d 'Bound on each Redis request' -x
complete -c redlock-run -n '__redlock_run_at release' -s v -l verbose -d 'More diagnostics (-v: info, -vv: debug)'
complete -c redlock-run -n '__redlock_run_at release' -s q -l quiet -d 'Only errors on stderr'
complete -c redlock-run -n '__redlock_run_at release' -l log-format -d 'Format of the diagnostics on stderr' -xa "text\t'redlock-run: level: message field=value …'
json\t'One JSON object per line, for log collectors (Kubernetes)'"
complete -c redlock-run -n '__redlock_run_at release' -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n '__redlock_run_at lock' -s k -l key -d 'Lock key; repeat to hold several, all or none' -x
complete -c redlock-run -n '__redlock_run_at lock' -s t -l ttl -d 'Lease length: how long the lock lives unrenewed' -x
complete -c redlock-run -n '__redlock_run_at lock' -l busy-exit-code -d 'Exit status when the lock is busy (like flock -E)' -x
complete -c redlock-run -n '__redlock_run_at lock' -l limit -d 'Admit up to N holders at once (a semaphore)' -x
complete -c redlock-run -n '__redlock_run_at lock' -l shared -d 'Hold the lock shared: beside other shared runs'
complete -c redlock-run -n '__redlock_run_at lock' -l min-hold -d 'Hold the lock at least this long' -x
complete -c redlock-run -n '__redlock_run_at lock' -l idempotency-key -d 'Succeed at most once per ID' -x
complete -c redlock-run -n '__redlock_run_at lock' -l idempotency-ttl -d 'How long a success record is kept' -x
complete -c redlock-run -n '__redlock_run_at lock' -l note -d 'A label stored with the holder (a job\'s URL)' -x
complete -c redlock-run -n '__redlock_run_at lock' -s w -l wait -d 'How long to wait for a busy lock; 0 = fail at once' -x
complete -c redlock-run -n '__redlock_run_at lock' -l jitter -d 'Sleep a random part of DUR before the first attempt' -x
complete -c redlock-run -n '__redlock_run_at lock' -l fail-open -d 'Run without a lock if Redis is unreachable'
complete -c redlock-run -n '__redlock_run_at lock' -l renew-every -d 'Renewal period' -x
complete -c redlock-run -n '__redlock_run_at lock' -l kill-grace -d 'Time between SIGTERM and SIGKILL' -x
complete -c redlock-run -n '__redlock_run_at lock' -l on-lost -d 'What to do when the lock is lost' -xa "terminate\t'Stop the command (SIGTERM, then SIGKILL) before the lock can expire under it; exit 125'
ignore\t'Keep the command running without the lock, warn loudly, exit with the command\'s status'"
complete -c redlock-run -n '__redlock_run_at lock' -l max-runtime -d 'Stop the command after this long (exit 124)' -x
complete -c redlock-run -n '__redlock_run_at lock' -l no-new-privs -d 'Keep the command from gaining privileges'
complete -c redlock-run -n '__redlock_run_at lock' -l redis-url -d 'Redis URL (redis://, rediss://, unix://)' -x
complete -c redlock-run -n '__redlock_run_at lock' -l password-file -d 'Read the Redis password from this file' -rF
complete -c redlock-run -n '__redlock_run_at lock' -l tls-ca-file -d 'CA certificates (PEM) to verify with' -rF
complete -c redlock-run -n '__redlock_run_at lock' -l tls-cert-file -d 'Client certificate (PEM) for mutual TLS' -rF
complete -c redlock-run -n '__redlock_run_at lock' -l tls-key-file -d 'Client private key (PEM) for mutual TLS' -rF
complete -c redlock-run -n '__redlock_run_at lock' -l tls-insecure -d 'Do not verify the server\'s certificate'
complete -c redlock-run -n '__redlock_run_at lock' -l sentinel -d 'Find the master through this Sentinel' -x
complete -c redlock-run -n '__redlock_run_at lock' -l sentinel-master -d 'Name of the master the Sentinels watch' -x
complete -c redlock-run -n '__redlock_run_at lock' -l sentinel-password-file -d 'The Sentinels\' password, from a file' -rF
complete -c redlock-run -n '__redlock_run_at lock' -l cluster -d 'Talk to a Redis Cluster'
complete -c redlock-run -n '__redlock_run_at lock' -l connect-timeout -d 'Bound on connecting to Redis' -x
complete -c redlock-run -n '__redlock_run_at lock' -l command-timeout -d 'Bound on each Redis request' -x
complete -c redlock-run -n '__redlock_run_at lock' -l metrics-file -d 'Write Prometheus metrics to PATH at exit' -rF
complete -c redlock-run -n '__redlock_run_at lock' -s v -l verbose -d 'More diagnostics (-v: info, -vv: debug)'
complete -c redlock-run -n '__redlock_run_at lock' -s q -l quiet -d 'Only errors on stderr'
complete -c redlock-run -n '__redlock_run_at lock' -l log-format -d 'Format of the diagnostics on stderr' -xa "text\t'redlock-run: level: message field=value …'
json\t'One JSON object per line, for log collectors (Kubernetes)'"
complete -c redlock-run -n '__redlock_run_at lock' -l allow-interactive -d 'Allow a lock held by an interactive shell'
complete -c redlock-run -n '__redlock_run_at lock' -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n '__redlock_run_at unlock' -s v -l verbose -d 'More diagnostics (-v: info, -vv: debug)'
complete -c redlock-run -n '__redlock_run_at unlock' -s q -l quiet -d 'Only errors on stderr'
complete -c redlock-run -n '__redlock_run_at unlock' -l log-format -d 'Format of the diagnostics on stderr' -xa "text\t'redlock-run: level: message field=value …'
json\t'One JSON object per line, for log collectors (Kubernetes)'"
complete -c redlock-run -n '__redlock_run_at unlock' -s h -l help -d 'Print help (see more with \'--help\')'
