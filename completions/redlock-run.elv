
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
            cand --renew-every 'Renewal period while the command runs [default: ttl/3]'
            cand --kill-grace 'Time between SIGTERM and SIGKILL when the command must stop [default: min(10s, ttl/6)]'
            cand --on-lost 'What to do when ownership is lost or can no longer be confirmed'
            cand --max-runtime 'Stop the command after this long, like timeout(1); exit status 124'
            cand --redis-url 'Redis to lock in: redis://, unix:// [env: REDLOCK_REDIS_URL, then REDIS_URL]'
            cand -v 'More diagnostics on stderr (-v: info, -vv: debug)'
            cand --verbose 'More diagnostics on stderr (-v: info, -vv: debug)'
            cand -q 'Only errors on stderr (-v wins over it)'
            cand --quiet 'Only errors on stderr (-v wins over it)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
    ]
    $completions[$command]
}
