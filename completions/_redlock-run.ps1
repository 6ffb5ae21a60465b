
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'redlock-run' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'redlock-run'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'redlock-run' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Lock key, used verbatim (any bytes the shell can pass)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Lock key, used verbatim (any bytes the shell can pass)')
            [CompletionResult]::new('-t', '-t', [CompletionResultType]::ParameterName, 'Lease length: how long the lock lives without renewal')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length: how long the lock lives without renewal')
            [CompletionResult]::new('--busy-exit-code', '--busy-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock is held by someone else (like flock -E)')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock at least this long after acquiring it, even if the command ends sooner (for cron hosts whose clocks disagree); the wrapper does not wait for it')
            [CompletionResult]::new('--idempotency-key', '--idempotency-key', [CompletionResultType]::ParameterName, 'Skip (exit 0) if a run with this ID already succeeded; record success after exit 0')
            [CompletionResult]::new('--idempotency-ttl', '--idempotency-ttl', [CompletionResultType]::ParameterName, 'How long a success record of --idempotency-key is kept')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock; 0 = fail at once')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock; 0 = fail at once')
            [CompletionResult]::new('--renew-every', '--renew-every', [CompletionResultType]::ParameterName, 'Renewal period while the command runs [default: ttl/3]')
            [CompletionResult]::new('--kill-grace', '--kill-grace', [CompletionResultType]::ParameterName, 'Time between SIGTERM and SIGKILL when the command must stop [default: min(10s, ttl/6)]')
            [CompletionResult]::new('--on-lost', '--on-lost', [CompletionResultType]::ParameterName, 'What to do when ownership is lost or can no longer be confirmed')
            [CompletionResult]::new('--max-runtime', '--max-runtime', [CompletionResultType]::ParameterName, 'Stop the command after this long, like timeout(1); exit status 124')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]')
            [CompletionResult]::new('--tls-ca-file', '--tls-ca-file', [CompletionResultType]::ParameterName, 'CA certificate(s) (PEM) to verify the server with, instead of the system''s')
            [CompletionResult]::new('--tls-cert-file', '--tls-cert-file', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key-file')
            [CompletionResult]::new('--tls-key-file', '--tls-key-file', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert-file')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database')
            [CompletionResult]::new('--sentinel-master', '--sentinel-master', [CompletionResultType]::ParameterName, 'Name of the master the Sentinels watch')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]')
            [CompletionResult]::new('--command-timeout', '--command-timeout', [CompletionResultType]::ParameterName, 'Bound on each Redis request [default: from the lease, at most 2s]')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'Write Prometheus text-format metrics to PATH at exit (atomically), for the node_exporter textfile collector')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of the diagnostics on stderr')
            [CompletionResult]::new('--fail-open', '--fail-open', [CompletionResultType]::ParameterName, 'If Redis is unreachable at start, run the command anyway, without a lock (loud warning)')
            [CompletionResult]::new('--no-new-privs', '--no-new-privs', [CompletionResultType]::ParameterName, 'Start the command with no_new_privs set, so that sudo and setuid programs cannot make it another user''s process, which the wrapper could no longer stop')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate or host name (a warning says so on every run)')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'Talk to a Redis Cluster; the --redis-url values are its seed nodes')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: info, -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: info, -vv: debug)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr (-v wins over it)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr (-v wins over it)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds the lock, since when, the TTL left, the fence and idempotency records; exit 0 when held, 1 when free')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Operator override: delete a stuck lock whatever its value, and wake waiters')
            break
        }
        'redlock-run;status' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Lock key, used verbatim')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Lock key, used verbatim')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]')
            [CompletionResult]::new('--tls-ca-file', '--tls-ca-file', [CompletionResultType]::ParameterName, 'CA certificate(s) (PEM) to verify the server with, instead of the system''s')
            [CompletionResult]::new('--tls-cert-file', '--tls-cert-file', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key-file')
            [CompletionResult]::new('--tls-key-file', '--tls-key-file', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert-file')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database')
            [CompletionResult]::new('--sentinel-master', '--sentinel-master', [CompletionResultType]::ParameterName, 'Name of the master the Sentinels watch')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]')
            [CompletionResult]::new('--command-timeout', '--command-timeout', [CompletionResultType]::ParameterName, 'Bound on each Redis request [default: from the lease, at most 2s]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of the diagnostics on stderr')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of text')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate or host name (a warning says so on every run)')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'Talk to a Redis Cluster; the --redis-url values are its seed nodes')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: info, -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: info, -vv: debug)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr (-v wins over it)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr (-v wins over it)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;release' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Lock key, used verbatim')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Lock key, used verbatim')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis to lock in: redis://, rediss:// (TLS), unix://; several seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from this file (first line), so it never sits in argv [the password can also come from the URL or REDLOCK_PASSWORD]')
            [CompletionResult]::new('--tls-ca-file', '--tls-ca-file', [CompletionResultType]::ParameterName, 'CA certificate(s) (PEM) to verify the server with, instead of the system''s')
            [CompletionResult]::new('--tls-cert-file', '--tls-cert-file', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key-file')
            [CompletionResult]::new('--tls-key-file', '--tls-key-file', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert-file')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'Find the master through this Sentinel (HOST:PORT, or HOST for port 26379; repeat, or comma-separate in the environment); the URL then only gives the scheme, credentials and database')
            [CompletionResult]::new('--sentinel-master', '--sentinel-master', [CompletionResultType]::ParameterName, 'Name of the master the Sentinels watch')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Bound on establishing a connection to Redis [default: from the lease, at most 5s]')
            [CompletionResult]::new('--command-timeout', '--command-timeout', [CompletionResultType]::ParameterName, 'Bound on each Redis request [default: from the lease, at most 2s]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of the diagnostics on stderr')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Required: deleting someone else''s lock can let two runs overlap')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of text')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate or host name (a warning says so on every run)')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'Talk to a Redis Cluster; the --redis-url values are its seed nodes')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: info, -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics on stderr (-v: info, -vv: debug)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr (-v wins over it)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr (-v wins over it)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
