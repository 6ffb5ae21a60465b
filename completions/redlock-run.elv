
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
            cand -k 'Lock key; repeat to hold several, all or none'
            cand --key 'Lock key; repeat to hold several, all or none'
            cand -t 'Lease length: how long the lock lives unrenewed'
            cand --ttl 'Lease length: how long the lock lives unrenewed'
            cand --busy-exit-code 'Exit status when the lock is busy (like flock -E)'
            cand --limit 'Admit up to N holders at once (a semaphore)'
            cand --min-hold 'Hold the lock at least this long'
            cand --idempotency-key 'Succeed at most once per ID'
            cand --idempotency-ttl 'How long a success record is kept'
            cand -w 'How long to wait for a busy lock; 0 = fail at once'
            cand --wait 'How long to wait for a busy lock; 0 = fail at once'
            cand --renew-every 'Renewal period [default: ttl/3]'
            cand --kill-grace 'Time between SIGTERM and SIGKILL'
            cand --on-lost 'What to do when the lock is lost'
            cand --max-runtime 'Stop the command after this long (exit 124)'
            cand --redis-url 'Redis URL (redis://, rediss://, unix://)'
            cand --password-file 'Read the Redis password from this file'
            cand --tls-ca-file 'CA certificates (PEM) to verify with'
            cand --tls-cert-file 'Client certificate (PEM) for mutual TLS'
            cand --tls-key-file 'Client private key (PEM) for mutual TLS'
            cand --sentinel 'Find the master through this Sentinel'
            cand --sentinel-master 'Name of the master the Sentinels watch'
            cand --sentinel-password-file 'The Sentinels'' password, from a file'
            cand --connect-timeout 'Bound on connecting to Redis'
            cand --command-timeout 'Bound on each Redis request'
            cand --metrics-file 'Write Prometheus metrics to PATH at exit'
            cand --log-format 'Format of the diagnostics on stderr'
            cand --generate 'Print a man page or a completion script, and exit'
            cand --shared 'Hold the lock shared: beside other shared runs'
            cand --fail-open 'Run without a lock if Redis is unreachable'
            cand --no-new-privs 'Keep the command from gaining privileges'
            cand --tls-insecure 'Do not verify the server''s certificate'
            cand --cluster 'Talk to a Redis Cluster'
            cand -v 'More diagnostics (-v: info, -vv: debug)'
            cand --verbose 'More diagnostics (-v: info, -vv: debug)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand status 'Show who holds the lock; exit 0 when held, 1 when free'
            cand release 'Delete a stuck lock (operator override)'
        }
        &'redlock-run;status'= {
            cand -k 'Lock key; repeat to hold several, all or none'
            cand --key 'Lock key; repeat to hold several, all or none'
            cand --redis-url 'Redis URL (redis://, rediss://, unix://)'
            cand --password-file 'Read the Redis password from this file'
            cand --tls-ca-file 'CA certificates (PEM) to verify with'
            cand --tls-cert-file 'Client certificate (PEM) for mutual TLS'
            cand --tls-key-file 'Client private key (PEM) for mutual TLS'
            cand --sentinel 'Find the master through this Sentinel'
            cand --sentinel-master 'Name of the master the Sentinels watch'
            cand --sentinel-password-file 'The Sentinels'' password, from a file'
            cand --connect-timeout 'Bound on connecting to Redis'
            cand --command-timeout 'Bound on each Redis request'
            cand --log-format 'Format of the diagnostics on stderr'
            cand --json 'Print one JSON object instead of text'
            cand --tls-insecure 'Do not verify the server''s certificate'
            cand --cluster 'Talk to a Redis Cluster'
            cand -v 'More diagnostics (-v: info, -vv: debug)'
            cand --verbose 'More diagnostics (-v: info, -vv: debug)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'redlock-run;release'= {
            cand -k 'Lock key; repeat to hold several, all or none'
            cand --key 'Lock key; repeat to hold several, all or none'
            cand --holder 'Drop only the holder whose token starts with this'
            cand --redis-url 'Redis URL (redis://, rediss://, unix://)'
            cand --password-file 'Read the Redis password from this file'
            cand --tls-ca-file 'CA certificates (PEM) to verify with'
            cand --tls-cert-file 'Client certificate (PEM) for mutual TLS'
            cand --tls-key-file 'Client private key (PEM) for mutual TLS'
            cand --sentinel 'Find the master through this Sentinel'
            cand --sentinel-master 'Name of the master the Sentinels watch'
            cand --sentinel-password-file 'The Sentinels'' password, from a file'
            cand --connect-timeout 'Bound on connecting to Redis'
            cand --command-timeout 'Bound on each Redis request'
            cand --log-format 'Format of the diagnostics on stderr'
            cand --force 'Required: a forced release can let two runs overlap'
            cand --json 'Print one JSON object instead of text'
            cand --tls-insecure 'Do not verify the server''s certificate'
            cand --cluster 'Talk to a Redis Cluster'
            cand -v 'More diagnostics (-v: info, -vv: debug)'
            cand --verbose 'More diagnostics (-v: info, -vv: debug)'
            cand -q 'Only errors on stderr'
            cand --quiet 'Only errors on stderr'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
    ]
    $completions[$command]
}
