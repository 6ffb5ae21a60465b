# Usage: zsh -f capture.zsh COMPLETION_DIR 'command line'
# Prints the matches zsh's completion system offers at the end of the line, one per line.
zmodload zsh/zpty || exit 2
dir=$1 line=$2
zpty z zsh -f -i
zpty -w z "PROMPT=''; RPROMPT=''; unsetopt zle_bracketed_paste 2>/dev/null; fpath=(${(q)dir} \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'compadd () {
  if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi
  typeset -a __hits; builtin compadd -A __hits "$@"
  local h; for h in $__hits; do print -r -- "${(L):-<<HIT}:$h>>"; done
}'
zpty -w z "zstyle ':completion:*' list-grouped false; zstyle ':completion:*' insert-tab false; zstyle ':completion:*' list-prompt ''; zstyle ':completion:*' select-prompt ''; zstyle ':completion:*' menu no"
zpty -w z 'finish() { print -r -- "${(L):-<<END>>}"; exit }; zle -N finish; bindkey "^X" finish'
zpty -n -w z "$line"$'\t\x18'
out=
integer n=0
while (( n++ < 500 )); do
  if zpty -r -t z chunk; then
    out+=$chunk
    [[ $out == *'<<end>>'* ]] && break
  else
    sleep 0.01
  fi
done
zpty -d z
print -r -- "$out" | grep -ao '<<hit:[^>]*>>' | sed 's/^<<hit://; s/>>$//' | sort -u
