# Usage: bash --norc complete.bash SCRIPT full|bare 'command line'
# Runs SCRIPT's completion function for the line as bash would at its end (with or without the
# bash-completion package loaded) and prints COMPREPLY, one match per line.
script=$1 mode=$2 line=$3
if [[ $mode == full ]]; then
    # shellcheck disable=SC1091
    source /usr/share/bash-completion/bash_completion || exit 2
fi
# shellcheck disable=SC1090
source "$script" || exit 2
spec=$(complete -p redlock-run) || exit 2
fn=${spec#*-F }
fn=${fn%% *}

# COMP_WORDS as readline splits them: at blanks, and around runs of ':' and '=' (the default
# COMP_WORDBREAKS characters that appear in these lines).
COMP_WORDS=()
read -ra blank_words <<<"$line"
[[ $line == *[[:blank:]] ]] && blank_words+=("")
for word in "${blank_words[@]}"; do
    [[ -z $word ]] && COMP_WORDS+=("") && continue
    while [[ -n $word ]]; do
        if [[ $word =~ ^[:=]+ || $word =~ ^[^:=]+ ]]; then
            COMP_WORDS+=("${BASH_REMATCH[0]}")
            word=${word:${#BASH_REMATCH[0]}}
        fi
    done
done
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE=$line
COMP_POINT=${#line}
COMPREPLY=()
"$fn" redlock-run "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\n' "${COMPREPLY[@]}"
