
use builtin;
use str;

set edit:completion:arg-completer[redlock-run] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'redlock-run'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'redlock-run'= {
            cand -k 'Lock key, used verbatim (any bytes the shell can pass)'
            cand --key 'Lock key, used verbatim (any bytes the shell can pass)'
            cand -t 'Lease length: how long the lock lives without renewal'
            cand --ttl 'Lease length: how long the lock lives without renewal'
            cand --busy-exit-code 'Exit status when the lock is held by someone else (like flock -E)'
            cand --min-hold 'Keep the lock at least this long after acquiring it, even if the command ends sooner (for cron hosts whose clocks disagree); the wrapper does not wait for it'
            cand --idempotency-key 'Skip (exit 0) if a run with this ID already succeeded; record success after exit 0'
            cand --idempotency-ttl 'How long a success record of --idempotency-key is kept'
            cand -w 'How long to wait for a busy lock; 0 = fail at once'
            cand --wait 'How long to wait for a busy lock; 0 = fail at once'
            cand --renew-every 'Renewal period while the command runs [default: ttl/3]'
            cand --kill-grace 'Time between SIGTERM and SIGKILL when the command must stop [default: min(10s, ttl/6)]'
            cand --on-lost 'What to do when ownership is lost or can no longer be confirmed'
            cand --max-runtime 'Stop the command after this long, like timeout(1); exit status 124'
            cand --redis-url 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]'
            cand --password-file 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]'
            cand --tls-ca-file 'CA certificate(s) (PEM) to verify the server with, instead of the system''s'
            cand --tls-cert-file 'Client certificate (PEM) for mutual TLS; needs --tls-key-file'
            cand --tls-key-file 'Client private key (PEM) for mutual TLS; needs --tls-cert-file'
            cand --sentinel 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database'
            cand --sentinel-master 'Name of the master the Sentinels watch'
            cand --connect-timeout 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]'
            cand --command-timeout 'Bound on each Redis request [default: from the lease, at most 2s]'
            cand --metrics-file 'Write Prometheus text-format metrics to PATH at exit (atomically), for the node_exporter textfile collector'
            cand --log-format 'Format of the diagnostics on stderr'
            cand --fail-open 'If Redis is unreachable at start, run the command anyway, without a lock (loud warning)'
            cand --no-new-privs 'Start the command with no_new_privs set, so that sudo and setuid programs cannot make it another user''s process, which the wrapper could no longer stop'
            cand --tls-insecure 'Do not verify the server''s certificate or host name (a warning says so on every run)'
            cand --cluster 'Talk to a Redis Cluster; the --redis-url values are its seed nodes'
            cand -v 'More diagnostics on stderr (-v: info, -vv: debug)'
            cand --verbose 'More diagnostics on stderr (-v: info, -vv: debug)'
            cand -q 'Only errors on stderr (-v wins over it)'
            cand --quiet 'Only errors on stderr (-v wins over it)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand status 'Show who holds the lock, since when, the TTL left, the fence and idempotency records; exit 0 when held, 1 when free'
            cand release 'Operator override: delete a stuck lock whatever its value, and wake waiters'
        }
        &'redlock-run;status'= {
            cand -k 'Lock key, used verbatim'
            cand --key 'Lock key, used verbatim'
            cand --redis-url 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]'
            cand --password-file 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]'
            cand --tls-ca-file 'CA certificate(s) (PEM) to verify the server with, instead of the system''s'
            cand --tls-cert-file 'Client certificate (PEM) for mutual TLS; needs --tls-key-file'
            cand --tls-key-file 'Client private key (PEM) for mutual TLS; needs --tls-cert-file'
            cand --sentinel 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database'
            cand --sentinel-master 'Name of the master the Sentinels watch'
            cand --connect-timeout 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]'
            cand --command-timeout 'Bound on each Redis request [default: from the lease, at most 2s]'
            cand --log-format 'Format of the diagnostics on stderr'
            cand --json 'Print one JSON object instead of text'
            cand --tls-insecure 'Do not verify the server''s certificate or host name (a warning says so on every run)'
            cand --cluster 'Talk to a Redis Cluster; the --redis-url values are its seed nodes'
            cand -v 'More diagnostics on stderr (-v: info, -vv: debug)'
            cand --verbose 'More diagnostics on stderr (-v: info, -vv: debug)'
            cand -q 'Only errors on stderr (-v wins over it)'
            cand --quiet 'Only errors on stderr (-v wins over it)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'redlock-run;release'= {
            cand -k 'Lock key, used verbatim'
            cand --key 'Lock key, used verbatim'
            cand --redis-url 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]'
            cand --password-file 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]'
            cand --tls-ca-file 'CA certificate(s) (PEM) to verify the server with, instead of the system''s'
            cand --tls-cert-file 'Client certificate (PEM) for mutual TLS; needs --tls-key-file'
            cand --tls-key-file 'Client private key (PEM) for mutual TLS; needs --tls-cert-file'
            cand --sentinel 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database'
            cand --sentinel-master 'Name of the master the Sentinels watch'
            cand --connect-timeout 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]'
            cand --command-timeout 'Bound on each Redis request [default: from the lease, at most 2s]'
            cand --log-format 'Format of the diagnostics on stderr'
            cand --force 'Required: deleting someone else''s lock can let two runs overlap'
            cand --json 'Print one JSON object instead of text'
            cand --tls-insecure 'Do not verify the server''s certificate or host name (a warning says so on every run)'
            cand --cluster 'Talk to a Redis Cluster; the --redis-url values are its seed nodes'
            cand -v 'More diagnostics on stderr (-v: info, -vv: debug)'
            cand --verbose 'More diagnostics on stderr (-v: info, -vv: debug)'
            cand -q 'Only errors on stderr (-v wins over it)'
            cand --quiet 'Only errors on stderr (-v wins over it)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
    ]
    $completions[$command]
}
