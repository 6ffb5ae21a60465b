complete -c redlock-run -s k -l key -d 'Lock key, used verbatim (any bytes the shell can pass)' -r
complete -c redlock-run -s t -l ttl -d 'Lease length: how long the lock lives without renewal' -r
complete -c redlock-run -l busy-exit-code -d 'Exit status when the lock is held by someone else (like flock -E)' -r
complete -c redlock-run -l min-hold -d 'Keep the lock at least this long after acquiring it, even if the command ends sooner (for cron hosts whose clocks disagree); the wrapper does not wait for it' -r
complete -c redlock-run -l idempotency-key -d 'Skip (exit 0) if a run with this ID already succeeded; record success after exit 0' -r
complete -c redlock-run -l idempotency-ttl -d 'How long a success record of --idempotency-key is kept' -r
complete -c redlock-run -s w -l wait -d 'How long to wait for a busy lock; 0 = fail at once' -r
complete -c redlock-run -l renew-every -d 'Renewal period while the command runs [default: ttl/3]' -r
complete -c redlock-run -l kill-grace -d 'Time between SIGTERM and SIGKILL when the command must stop [default: min(10s, ttl/6)]' -r
complete -c redlock-run -l on-lost -d 'What to do when ownership is lost or can no longer be confirmed' -r -f -a "terminate\t'Stop the command (SIGTERM, then SIGKILL) before the lock can expire under it; exit 125'
ignore\t'Keep the command running without the lock, warn loudly, exit with the command\'s status'"
complete -c redlock-run -l max-runtime -d 'Stop the command after this long, like timeout(1); exit status 124' -r
complete -c redlock-run -l redis-url -d 'Redis to lock in: redis://, unix:// [env: REDLOCK_REDIS_URL, then REDIS_URL]' -r
complete -c redlock-run -l connect-timeout -d 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]' -r
complete -c redlock-run -l command-timeout -d 'Bound on each Redis request [default: from the lease, at most 2s]' -r
complete -c redlock-run -l fail-open -d 'If Redis is unreachable at start, run the command anyway, without a lock (loud warning)'
complete -c redlock-run -s v -l verbose -d 'More diagnostics on stderr (-v: info, -vv: debug)'
complete -c redlock-run -s q -l quiet -d 'Only errors on stderr (-v wins over it)'
complete -c redlock-run -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -s V -l version -d 'Print version'
