
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
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Lock key; repeat to hold several, all or none')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Lock key; repeat to hold several, all or none')
            [CompletionResult]::new('-t', '-t', [CompletionResultType]::ParameterName, 'Lease length: how long the lock lives unrenewed')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length: how long the lock lives unrenewed')
            [CompletionResult]::new('--busy-exit-code', '--busy-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock is busy (like flock -E)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Admit up to N holders at once (a semaphore)')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Hold the lock at least this long')
            [CompletionResult]::new('--idempotency-key', '--idempotency-key', [CompletionResultType]::ParameterName, 'Succeed at most once per ID')
            [CompletionResult]::new('--idempotency-ttl', '--idempotency-ttl', [CompletionResultType]::ParameterName, 'How long a success record is kept')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'A label stored with the holder (a job''s URL)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock; 0 = fail at once')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock; 0 = fail at once')
            [CompletionResult]::new('--jitter', '--jitter', [CompletionResultType]::ParameterName, 'Sleep a random part of DUR before the first attempt')
            [CompletionResult]::new('--renew-every', '--renew-every', [CompletionResultType]::ParameterName, 'Renewal period [default: ttl/3]')
            [CompletionResult]::new('--kill-grace', '--kill-grace', [CompletionResultType]::ParameterName, 'Time between SIGTERM and SIGKILL')
            [CompletionResult]::new('--on-lost', '--on-lost', [CompletionResultType]::ParameterName, 'What to do when the lock is lost')
            [CompletionResult]::new('--max-runtime', '--max-runtime', [CompletionResultType]::ParameterName, 'Stop the command after this long (exit 124)')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis URL (redis://, rediss://, unix://)')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from this file')
            [CompletionResult]::new('--tls-ca-file', '--tls-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify with')
            [CompletionResult]::new('--tls-cert-file', '--tls-cert-file', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS')
            [CompletionResult]::new('--tls-key-file', '--tls-key-file', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'Find the master through this Sentinel')
            [CompletionResult]::new('--sentinel-master', '--sentinel-master', [CompletionResultType]::ParameterName, 'Name of the master the Sentinels watch')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'The Sentinels'' password, from a file')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting to Redis')
            [CompletionResult]::new('--command-timeout', '--command-timeout', [CompletionResultType]::ParameterName, 'Bound on each Redis request')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'Write Prometheus metrics to PATH at exit')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of the diagnostics on stderr')
            [CompletionResult]::new('--generate', '--generate', [CompletionResultType]::ParameterName, 'Print a man page or a completion script, and exit')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold the lock shared: beside other shared runs')
            [CompletionResult]::new('--fail-open', '--fail-open', [CompletionResultType]::ParameterName, 'Run without a lock if Redis is unreachable')
            [CompletionResult]::new('--no-new-privs', '--no-new-privs', [CompletionResultType]::ParameterName, 'Keep the command from gaining privileges')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'Talk to a Redis Cluster')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds the lock; exit 0 when held, 1 when free')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Delete a stuck lock (operator override)')
            [CompletionResult]::new('lock', 'lock', [CompletionResultType]::ParameterValue, 'Hold the lock for the rest of a shell script')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Release the lock taken by `lock` in this script')
            break
        }
        'redlock-run;status' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Lock key; repeat to hold several, all or none')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Lock key; repeat to hold several, all or none')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis URL (redis://, rediss://, unix://)')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from this file')
            [CompletionResult]::new('--tls-ca-file', '--tls-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify with')
            [CompletionResult]::new('--tls-cert-file', '--tls-cert-file', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS')
            [CompletionResult]::new('--tls-key-file', '--tls-key-file', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'Find the master through this Sentinel')
            [CompletionResult]::new('--sentinel-master', '--sentinel-master', [CompletionResultType]::ParameterName, 'Name of the master the Sentinels watch')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'The Sentinels'' password, from a file')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting to Redis')
            [CompletionResult]::new('--command-timeout', '--command-timeout', [CompletionResultType]::ParameterName, 'Bound on each Redis request')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of the diagnostics on stderr')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of text')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'Talk to a Redis Cluster')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;release' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Lock key; repeat to hold several, all or none')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Lock key; repeat to hold several, all or none')
            [CompletionResult]::new('--holder', '--holder', [CompletionResultType]::ParameterName, 'Drop only the holder whose token starts with this')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis URL (redis://, rediss://, unix://)')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from this file')
            [CompletionResult]::new('--tls-ca-file', '--tls-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify with')
            [CompletionResult]::new('--tls-cert-file', '--tls-cert-file', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS')
            [CompletionResult]::new('--tls-key-file', '--tls-key-file', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'Find the master through this Sentinel')
            [CompletionResult]::new('--sentinel-master', '--sentinel-master', [CompletionResultType]::ParameterName, 'Name of the master the Sentinels watch')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'The Sentinels'' password, from a file')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting to Redis')
            [CompletionResult]::new('--command-timeout', '--command-timeout', [CompletionResultType]::ParameterName, 'Bound on each Redis request')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of the diagnostics on stderr')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Required: a forced release can let two runs overlap')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of text')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'Talk to a Redis Cluster')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;lock' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Lock key; repeat to hold several, all or none')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Lock key; repeat to hold several, all or none')
            [CompletionResult]::new('-t', '-t', [CompletionResultType]::ParameterName, 'Lease length: how long the lock lives unrenewed')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length: how long the lock lives unrenewed')
            [CompletionResult]::new('--busy-exit-code', '--busy-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock is busy (like flock -E)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Admit up to N holders at once (a semaphore)')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Hold the lock at least this long')
            [CompletionResult]::new('--idempotency-key', '--idempotency-key', [CompletionResultType]::ParameterName, 'Succeed at most once per ID')
            [CompletionResult]::new('--idempotency-ttl', '--idempotency-ttl', [CompletionResultType]::ParameterName, 'How long a success record is kept')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'A label stored with the holder (a job''s URL)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock; 0 = fail at once')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock; 0 = fail at once')
            [CompletionResult]::new('--jitter', '--jitter', [CompletionResultType]::ParameterName, 'Sleep a random part of DUR before the first attempt')
            [CompletionResult]::new('--renew-every', '--renew-every', [CompletionResultType]::ParameterName, 'Renewal period [default: ttl/3]')
            [CompletionResult]::new('--kill-grace', '--kill-grace', [CompletionResultType]::ParameterName, 'Time between SIGTERM and SIGKILL')
            [CompletionResult]::new('--on-lost', '--on-lost', [CompletionResultType]::ParameterName, 'What to do when the lock is lost')
            [CompletionResult]::new('--max-runtime', '--max-runtime', [CompletionResultType]::ParameterName, 'Stop the command after this long (exit 124)')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis URL (redis://, rediss://, unix://)')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from this file')
            [CompletionResult]::new('--tls-ca-file', '--tls-ca-file', [CompletionResultType]::ParameterName, 'CA certificates (PEM) to verify with')
            [CompletionResult]::new('--tls-cert-file', '--tls-cert-file', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS')
            [CompletionResult]::new('--tls-key-file', '--tls-key-file', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'Find the master through this Sentinel')
            [CompletionResult]::new('--sentinel-master', '--sentinel-master', [CompletionResultType]::ParameterName, 'Name of the master the Sentinels watch')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'The Sentinels'' password, from a file')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting to Redis')
            [CompletionResult]::new('--command-timeout', '--command-timeout', [CompletionResultType]::ParameterName, 'Bound on each Redis request')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'Write Prometheus metrics to PATH at exit')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of the diagnostics on stderr')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold the lock shared: beside other shared runs')
            [CompletionResult]::new('--fail-open', '--fail-open', [CompletionResultType]::ParameterName, 'Run without a lock if Redis is unreachable')
            [CompletionResult]::new('--no-new-privs', '--no-new-privs', [CompletionResultType]::ParameterName, 'Keep the command from gaining privileges')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'Talk to a Redis Cluster')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--allow-interactive', '--allow-interactive', [CompletionResultType]::ParameterName, 'Allow a lock held by an interactive shell')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'redlock-run;unlock' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of the diagnostics on stderr')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More diagnostics (-v: info, -vv: debug)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors on stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
