# bash completion for vmem; generated from the vmem app by `python -m veadk_mem.cli.docs`; do not edit.
# Install: source this file from ~/.bashrc, or copy it to
# ~/.local/share/bash-completion/completions/vmem
_vmem() {
  local cur="${COMP_WORDS[COMP_CWORD]}" path="" w i opts="" cmds=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    case "$path $w" in
      " doctor"|" forget"|" session"|" session list"|" session get"|" session delete"|" session export"|" session import"|" ltm"|" ltm save"|" ltm search"|" ltm list"|" ltm profile"|" ltm delete"|" policy"|" policy test"|" policy show"|" config"|" config show"|" config init"|" config path") path="$path $w" ;;
    esac
  done
  case "$path" in
    "") opts='--config -c --json --quiet -q --verbose -v --version'; cmds='doctor forget session ltm policy config' ;;
    " doctor") opts='--json'; cmds='' ;;
    " forget") opts='--app -a --db-url --dry-run --yes -y --json'; cmds='' ;;
    " session") opts=''; cmds='list get delete export import' ;;
    " session list") opts='--app --user --since --until --limit --offset --db-url --json'; cmds='' ;;
    " session get") opts='--events --db-url --json'; cmds='' ;;
    " session delete") opts='--app --user --older-than --purge-state --dry-run --yes -y --db-url --json'; cmds='' ;;
    " session export") opts='--app --user --since --until --output -o --db-url'; cmds='' ;;
    " session import") opts='--force --db-url --json'; cmds='' ;;
    " ltm") opts=''; cmds='save search list profile delete' ;;
    " ltm save") opts='--from-store --app -a --user -u --since --db-url --policy -p --include-assistant --dry-run --json'; cmds='' ;;
    " ltm search") opts='--user -u --app -a --top-k -k --min-score --json'; cmds='' ;;
    " ltm list") opts='--user -u --app -a --limit -n --json'; cmds='' ;;
    " ltm profile") opts='--app -a --json'; cmds='' ;;
    " ltm delete") opts='--user -u --id --session -s --all --app -a --dry-run --yes -y --json'; cmds='' ;;
    " policy") opts=''; cmds='test show' ;;
    " policy test") opts='--from-store --db-url --policy -p --include-assistant --json'; cmds='' ;;
    " policy show") opts='--include-assistant --json'; cmds='' ;;
    " config") opts=''; cmds='show init path' ;;
    " config show") opts='--json'; cmds='' ;;
    " config init") opts='--force'; cmds='' ;;
    " config path") opts='--json'; cmds='' ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$cmds" -- "$cur"))
  fi
}
complete -o default -o bashdefault -F _vmem vmem
