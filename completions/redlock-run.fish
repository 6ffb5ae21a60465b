# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_redlock_run_global_optspecs
    string join \n k/key= t/ttl= busy-exit-code= min-hold= idempotency-key= idempotency-ttl= w/wait= fail-open renew-every= kill-grace= on-lost= max-runtime= no-new-privs redis-url= password-file= tls-ca-file= tls-cert-file= tls-key-file= tls-insecure sentinel= sentinel-master= cluster connect-timeout= command-timeout= metrics-file= v/verbose q/quiet log-format= h/help V/version
end

function __fish_redlock_run_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_redlock_run_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_redlock_run_using_subcommand
    set -l cmd (__fish_redlock_run_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c redlock-run -n "__fish_redlock_run_needs_command" -s k -l key -d 'Lock key, used verbatim (any bytes the shell can pass)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s t -l ttl -d 'Lease length: how long the lock lives without renewal' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l busy-exit-code -d 'Exit status when the lock is held by someone else (like flock -E)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l min-hold -d 'Keep the lock at least this long after acquiring it, even if the command ends sooner (for cron hosts whose clocks disagree); the wrapper does not wait for it' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l idempotency-key -d 'Skip (exit 0) if a run with this ID already succeeded; record success after exit 0' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l idempotency-ttl -d 'How long a success record of --idempotency-key is kept' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s w -l wait -d 'How long to wait for a busy lock; 0 = fail at once' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l renew-every -d 'Renewal period while the command runs [default: ttl/3]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l kill-grace -d 'Time between SIGTERM and SIGKILL when the command must stop [default: min(10s, ttl/6)]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l on-lost -d 'What to do when ownership is lost or can no longer be confirmed' -r -f -a "terminate\t'Stop the command (SIGTERM, then SIGKILL) before the lock can expire under it; exit 125'
ignore\t'Keep the command running without the lock, warn loudly, exit with the command\'s status'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l max-runtime -d 'Stop the command after this long, like timeout(1); exit status 124' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l redis-url -d 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l password-file -d 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-ca-file -d 'CA certificate(s) (PEM) to verify the server with, instead of the system\'s' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-cert-file -d 'Client certificate (PEM) for mutual TLS; needs --tls-key-file' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-key-file -d 'Client private key (PEM) for mutual TLS; needs --tls-cert-file' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l sentinel -d 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l sentinel-master -d 'Name of the master the Sentinels watch' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l connect-timeout -d 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l command-timeout -d 'Bound on each Redis request [default: from the lease, at most 2s]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l metrics-file -d 'Write Prometheus text-format metrics to PATH at exit (atomically), for the node_exporter textfile collector' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l log-format -d 'Format of the diagnostics on stderr' -r -f -a "text\t'`redlock-run: level: message field=value …`'
json\t'One JSON object per line, for log collectors (Kubernetes)'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l fail-open -d 'If Redis is unreachable at start, run the command anyway, without a lock (loud warning)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l no-new-privs -d 'Start the command with no_new_privs set, so that sudo and setuid programs cannot make it another user\'s process, which the wrapper could no longer stop'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-insecure -d 'Do not verify the server\'s certificate or host name (a warning says so on every run)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l cluster -d 'Talk to a Redis Cluster; the --redis-url values are its seed nodes'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s v -l verbose -d 'More diagnostics on stderr (-v: info, -vv: debug)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s q -l quiet -d 'Only errors on stderr (-v wins over it)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s V -l version -d 'Print version'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "status" -d 'Show who holds the lock, since when, the TTL left, the fence and idempotency records; exit 0 when held, 1 when free'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "release" -d 'Operator override: delete a stuck lock whatever its value, and wake waiters'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s k -l key -d 'Lock key, used verbatim' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l redis-url -d 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l password-file -d 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-ca-file -d 'CA certificate(s) (PEM) to verify the server with, instead of the system\'s' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-cert-file -d 'Client certificate (PEM) for mutual TLS; needs --tls-key-file' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-key-file -d 'Client private key (PEM) for mutual TLS; needs --tls-cert-file' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l sentinel -d 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l sentinel-master -d 'Name of the master the Sentinels watch' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l connect-timeout -d 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l command-timeout -d 'Bound on each Redis request [default: from the lease, at most 2s]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l log-format -d 'Format of the diagnostics on stderr' -r -f -a "text\t'`redlock-run: level: message field=value …`'
json\t'One JSON object per line, for log collectors (Kubernetes)'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l json -d 'Print one JSON object instead of text'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-insecure -d 'Do not verify the server\'s certificate or host name (a warning says so on every run)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l cluster -d 'Talk to a Redis Cluster; the --redis-url values are its seed nodes'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s v -l verbose -d 'More diagnostics on stderr (-v: info, -vv: debug)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s q -l quiet -d 'Only errors on stderr (-v wins over it)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s k -l key -d 'Lock key, used verbatim' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l redis-url -d 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l password-file -d 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l tls-ca-file -d 'CA certificate(s) (PEM) to verify the server with, instead of the system\'s' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l tls-cert-file -d 'Client certificate (PEM) for mutual TLS; needs --tls-key-file' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l tls-key-file -d 'Client private key (PEM) for mutual TLS; needs --tls-cert-file' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l sentinel -d 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l sentinel-master -d 'Name of the master the Sentinels watch' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l connect-timeout -d 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l command-timeout -d 'Bound on each Redis request [default: from the lease, at most 2s]' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l log-format -d 'Format of the diagnostics on stderr' -r -f -a "text\t'`redlock-run: level: message field=value …`'
json\t'One JSON object per line, for log collectors (Kubernetes)'"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l force -d 'Required: deleting someone else\'s lock can let two runs overlap'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l json -d 'Print one JSON object instead of text'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l tls-insecure -d 'Do not verify the server\'s certificate or host name (a warning says so on every run)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l cluster -d 'Talk to a Redis Cluster; the --redis-url values are its seed nodes'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s v -l verbose -d 'More diagnostics on stderr (-v: info, -vv: debug)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s q -l quiet -d 'Only errors on stderr (-v wins over it)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
