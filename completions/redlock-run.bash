# bash completion for redlock-run                                   -*- shell-script -*-
# Generated from the command-line definition (src/cli.rs) by `redlock-run --generate`; do not edit.
# Works on its own; with the bash-completion package, values written --opt=VALUE and the
# command's own arguments (after `--` or the command name) are completed too.

# Whether word $2 is an option of ${1:-the wrapper} that takes the next word as its value.
_redlock_run_takes_value() {
    case $1 in
        '')
            case $2 in -k|--key|-t|--ttl|--busy-exit-code|--limit|--min-hold|--idempotency-key|--idempotency-ttl|--note|-w|--wait|--jitter|--renew-every|--kill-grace|--on-lost|--max-runtime|--redis-url|--password-file|--tls-ca-file|--tls-cert-file|--tls-key-file|--sentinel|--sentinel-master|--sentinel-password-file|--connect-timeout|--command-timeout|--metrics-file|--log-format|--generate) return 0 ;; esac
            [[ $2 =~ ^-[vqhV]*[ktw]$ ]] ;;
        'status')
            case $2 in -k|--key|--redis-url|--password-file|--tls-ca-file|--tls-cert-file|--tls-key-file|--sentinel|--sentinel-master|--sentinel-password-file|--connect-timeout|--command-timeout|--log-format) return 0 ;; esac
            [[ $2 =~ ^-[vqh]*[k]$ ]] ;;
        'release')
            case $2 in -k|--key|--holder|--redis-url|--password-file|--tls-ca-file|--tls-cert-file|--tls-key-file|--sentinel|--sentinel-master|--sentinel-password-file|--connect-timeout|--command-timeout|--log-format) return 0 ;; esac
            [[ $2 =~ ^-[vqh]*[k]$ ]] ;;
        'lock')
            case $2 in -k|--key|-t|--ttl|--busy-exit-code|--limit|--min-hold|--idempotency-key|--idempotency-ttl|--note|-w|--wait|--jitter|--renew-every|--kill-grace|--on-lost|--max-runtime|--redis-url|--password-file|--tls-ca-file|--tls-cert-file|--tls-key-file|--sentinel|--sentinel-master|--sentinel-password-file|--connect-timeout|--command-timeout|--metrics-file|--log-format) return 0 ;; esac
            [[ $2 =~ ^-[vqh]*[ktw]$ ]] ;;
        'unlock')
            case $2 in --log-format) return 0 ;; esac
            [[ $2 =~ ^-[vqh]*[]$ ]] ;;
        *) return 1 ;;
    esac
}

# The options of ${1:-the wrapper}.
_redlock_run_options() {
    case $1 in
        '') REPLY='-k --key -t --ttl --busy-exit-code --limit --shared --min-hold --idempotency-key --idempotency-ttl --note -w --wait --jitter --fail-open --renew-every --kill-grace --on-lost --max-runtime --no-new-privs --redis-url --password-file --tls-ca-file --tls-cert-file --tls-key-file --tls-insecure --sentinel --sentinel-master --sentinel-password-file --cluster --connect-timeout --command-timeout --metrics-file -v --verbose -q --quiet --log-format --generate -h --help -V --version' ;;
        'status') REPLY='-k --key --json --redis-url --password-file --tls-ca-file --tls-cert-file --tls-key-file --tls-insecure --sentinel --sentinel-master --sentinel-password-file --cluster --connect-timeout --command-timeout -v --verbose -q --quiet --log-format -h --help' ;;
        'release') REPLY='-k --key --force --holder --json --redis-url --password-file --tls-ca-file --tls-cert-file --tls-key-file --tls-insecure --sentinel --sentinel-master --sentinel-password-file --cluster --connect-timeout --command-timeout -v --verbose -q --quiet --log-format -h --help' ;;
        'lock') REPLY='-k --key -t --ttl --busy-exit-code --limit --shared --min-hold --idempotency-key --idempotency-ttl --note -w --wait --jitter --fail-open --renew-every --kill-grace --on-lost --max-runtime --no-new-privs --redis-url --password-file --tls-ca-file --tls-cert-file --tls-key-file --tls-insecure --sentinel --sentinel-master --sentinel-password-file --cluster --connect-timeout --command-timeout --metrics-file -v --verbose -q --quiet --log-format --allow-interactive -h --help' ;;
        'unlock') REPLY='-v --verbose -q --quiet --log-format -h --help' ;;
    esac
}

# Completes the value of option $2 of ${1:-the wrapper}; a free value (a key, a duration, a
# URL) gets nothing.
_redlock_run_value() {
    local opt=$2
    [[ $opt == -[!-]?* ]] && opt=-${opt: -1}
    case $1,$opt in
        '',--on-lost) COMPREPLY=($(compgen -W 'terminate ignore' -- "$cur")) ;;
        '',--password-file) _redlock_run_files ;;
        '',--tls-ca-file) _redlock_run_files ;;
        '',--tls-cert-file) _redlock_run_files ;;
        '',--tls-key-file) _redlock_run_files ;;
        '',--sentinel-password-file) _redlock_run_files ;;
        '',--metrics-file) _redlock_run_files ;;
        '',--log-format) COMPREPLY=($(compgen -W 'text json' -- "$cur")) ;;
        '',--generate) COMPREPLY=($(compgen -W 'man man-status man-release man-lock man-unlock bash zsh fish elvish powershell' -- "$cur")) ;;
        'status',--password-file) _redlock_run_files ;;
        'status',--tls-ca-file) _redlock_run_files ;;
        'status',--tls-cert-file) _redlock_run_files ;;
        'status',--tls-key-file) _redlock_run_files ;;
        'status',--sentinel-password-file) _redlock_run_files ;;
        'status',--log-format) COMPREPLY=($(compgen -W 'text json' -- "$cur")) ;;
        'release',--password-file) _redlock_run_files ;;
        'release',--tls-ca-file) _redlock_run_files ;;
        'release',--tls-cert-file) _redlock_run_files ;;
        'release',--tls-key-file) _redlock_run_files ;;
        'release',--sentinel-password-file) _redlock_run_files ;;
        'release',--log-format) COMPREPLY=($(compgen -W 'text json' -- "$cur")) ;;
        'lock',--on-lost) COMPREPLY=($(compgen -W 'terminate ignore' -- "$cur")) ;;
        'lock',--password-file) _redlock_run_files ;;
        'lock',--tls-ca-file) _redlock_run_files ;;
        'lock',--tls-cert-file) _redlock_run_files ;;
        'lock',--tls-key-file) _redlock_run_files ;;
        'lock',--sentinel-password-file) _redlock_run_files ;;
        'lock',--metrics-file) _redlock_run_files ;;
        'lock',--log-format) COMPREPLY=($(compgen -W 'text json' -- "$cur")) ;;
        'unlock',--log-format) COMPREPLY=($(compgen -W 'text json' -- "$cur")) ;;
        *) COMPREPLY=() ;;
    esac
}

_redlock_run_files() {
    if declare -F _filedir >/dev/null; then
        _filedir
    else
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

# Completes the command's own words, which start at words[$1]: its name, then whatever the
# shell's completion for that command offers (bash-completion's _command_offset), or files.
_redlock_run_command() {
    if declare -F _command_offset >/dev/null; then
        # bash-completion joined words that bash split at ':' (URLs); _command_offset counts
        # bash's words.
        local j=0 k=0 joined=
        while (( k < $1 && j < ${#COMP_WORDS[@]} )); do
            joined+=${COMP_WORDS[j]}
            (( j++ ))
            if [[ $joined == "${words[k]}" ]]; then
                joined=
                (( k++ ))
            fi
        done
        (( k == $1 )) || j=$(( $1 + ${#COMP_WORDS[@]} - ${#words[@]} ))
        _command_offset "$j"
    elif (( $1 == cword )); then
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -c -- "$cur") $(compgen -f -X '!*/*' -- "$cur"))
    else
        _redlock_run_files
    fi
}

_redlock_run() {
    local cur prev words cword split=false
    if declare -F _init_completion >/dev/null; then
        _init_completion -s -n : || return
    else
        # Words split at blanks only, so that URLs stay whole (no quoting rules).
        read -ra words <<<"${COMP_LINE:0:COMP_POINT}"
        [[ ${COMP_LINE:0:COMP_POINT} == *[[:blank:]] || ${#words[@]} -eq 0 ]] && words+=("")
        cword=$(( ${#words[@]} - 1 ))
        cur=${words[cword]}
        prev=${words[cword - 1]}
        if [[ $cur == --?*=* ]]; then
            prev=${cur%%=*}
            cur=${cur#*=}
            split=true
        fi
    fi

    local i=1 sub= word
    while (( i < cword )); do
        word=${words[i]}
        if [[ $word == -- ]]; then
            # After a subcommand's options nothing may follow.
            [[ -z $sub ]] && _redlock_run_command $(( i + 1 ))
            return
        elif _redlock_run_takes_value "$sub" "$word"; then
            if (( i + 1 == cword )); then
                _redlock_run_value "$sub" "$word"
                return
            fi
            (( i++ ))
        elif [[ $word == -* ]]; then
            :
        elif [[ -z $sub && $i -eq 1 && $word == @(status|release|lock|unlock) ]]; then
            sub=$word
        elif [[ -z $sub ]]; then
            _redlock_run_command "$i"
            return
        fi
        (( i++ ))
    done

    if [[ $split == true ]]; then
        _redlock_run_value "$sub" "$prev"
    elif [[ $cur == -* ]]; then
        _redlock_run_options "$sub"
        COMPREPLY=($(compgen -W "$REPLY" -- "$cur"))
    elif [[ -z $sub ]]; then
        _redlock_run_command "$cword"
        (( cword == 1 )) && COMPREPLY+=($(compgen -W 'status release lock unlock' -- "$cur"))
    fi
    return 0
}

complete -F _redlock_run redlock-run
