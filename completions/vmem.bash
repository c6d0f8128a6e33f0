# bash completion for vmem; generated from the vmem app by `python -m veadk_mem.cli.docs`; do not edit.
# Install: source this file from ~/.bashrc, or copy it to
# ~/.local/share/bash-completion/completions/vmem
_vmem() {
  local cur="${COMP_WORDS[COMP_CWORD]}" path="" w q i
  local prev="${COMP_WORDS[COMP_CWORD-1]}"
  local -a opts=() cmds=() words=()
  local named=
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    case "$path $w" in
      " doctor"|" forget"|" history"|" completion"|" browse"|" session"|" session list"|" session get"|" session delete"|" session export"|" session import"|" session upgrade"|" session stats"|" session watch"|" session prune"|" session vacuum"|" session index"|" ltm"|" ltm save"|" ltm search"|" ltm list"|" ltm profile"|" ltm delete"|" ltm edit"|" ltm show"|" ltm export"|" ltm import"|" ltm copy"|" ltm reembed"|" ltm sync"|" policy"|" policy test"|" policy show"|" config"|" config show"|" config init"|" config path"|" retention"|" retention show") path="$path $w" ;;
    esac
  done
  case "$path" in
    "") opts=(--config -c --json --quiet -q --verbose -v --version); cmds=(doctor forget history completion browse session ltm policy config retention) ;;
    " doctor") opts=(--db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " forget") opts=(--app -a --session -s --policy --db-url --dry-run --yes -y --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " history") opts=(--since --user -u --command --limit -n --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " completion") opts=(--install --config -c --json --quiet -q --verbose -v --wide --records --time-format); cmds=(bash zsh fish) ;;
    " browse") opts=(--db-url --app -a --user -u --read-only --config -c --json --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " session") opts=(); cmds=(list get delete export import upgrade stats watch prune vacuum index) ;;
    " session list") opts=(--app -a --user -u --since --until --limit -n --offset --compactions --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " session get") opts=(--events --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=(); named=1 ;;
    " session delete") opts=(--app -a --user -u --older-than --since --until --purge-state --with-memories --policy --dry-run --yes -y --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " session export") opts=(--app -a --user -u --since --until --output -o --db-url --config -c --json --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " session import") opts=(--force --db-url --dry-run --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " session upgrade") opts=(--backup --dry-run --drop-old --keep-undecodable --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " session stats") opts=(--app -a --user -u --since --until --by --top --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " session watch") opts=(--since --events --interval --max-interval --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=(); named=1 ;;
    " session prune") opts=(--app -a --with-memories --policy --dry-run --yes -y --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " session vacuum") opts=(--dry-run --yes -y --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " session index") opts=(--create --dry-run --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " ltm") opts=(); cmds=(save search list profile delete edit show export import copy reembed sync) ;;
    " ltm save") opts=(--from-store --app -a --user -u --since --until --db-url --policy -p --include-assistant --dry-run --no-infer --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm search") opts=(--user -u --app -a --top-k -k --mode -m --queries --min-score --since --until --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " ltm list") opts=(--user -u --app -a --limit -n --since --until --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " ltm profile") opts=(--app -a --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm delete") opts=(--user -u --id --session -s --all --app -a --since --until --dry-run --yes -y --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm edit") opts=(--text -t --user -u --app -a --dry-run --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm show") opts=(--user -u --app -a --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm export") opts=(--user -u --all-users --app -a --index -i --output -o --vectors --backend -b --config -c --json --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm import") opts=(--backend -b --index -i --dry-run --rehash --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm copy") opts=(--from-backend --to-backend --from-index --to-index --user -u --dry-run --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm reembed") opts=(--user -u --app -a --model -m --dry-run --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " ltm sync") opts=(--app -a --user -u --policy -p --once --follow --status --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " policy") opts=(); cmds=(test show) ;;
    " policy test") opts=(--from-store --db-url --policy -p --include-assistant --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " policy show") opts=(--include-assistant --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=(default all custom) ;;
    " config") opts=(); cmds=(show init path) ;;
    " config show") opts=(--db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
    " config init") opts=(--force --config -c --json --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " config path") opts=(--json --config -c --quiet -q --verbose -v --wide --records --time-format); cmds=() ;;
    " retention") opts=(); cmds=(show) ;;
    " retention show") opts=(--app -a --db-url --json --config -c --quiet -q --verbose -v --wide --records --time-format --jsonl --csv --tsv); cmds=() ;;
  esac
  case "$path $prev" in
    " doctor --time-format") cmds=(compact local iso); opts=(); named= ;;
    " forget --policy") cmds=(default all custom); opts=(); named= ;;
    " forget --time-format") cmds=(compact local iso); opts=(); named= ;;
    " history --time-format") cmds=(compact local iso); opts=(); named= ;;
    " completion --time-format") cmds=(compact local iso); opts=(); named= ;;
    " browse --time-format") cmds=(compact local iso); opts=(); named= ;;
    " browse --app") cmds=(); opts=(); named=1 ;;
    " browse -a") cmds=(); opts=(); named=1 ;;
    " browse --user") cmds=(); opts=(); named=1 ;;
    " browse -u") cmds=(); opts=(); named=1 ;;
    " session list --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session list --app") cmds=(); opts=(); named=1 ;;
    " session list -a") cmds=(); opts=(); named=1 ;;
    " session list --user") cmds=(); opts=(); named=1 ;;
    " session list -u") cmds=(); opts=(); named=1 ;;
    " session get --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session delete --policy") cmds=(default all custom); opts=(); named= ;;
    " session delete --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session delete --app") cmds=(); opts=(); named=1 ;;
    " session delete -a") cmds=(); opts=(); named=1 ;;
    " session delete --user") cmds=(); opts=(); named=1 ;;
    " session delete -u") cmds=(); opts=(); named=1 ;;
    " session export --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session export --app") cmds=(); opts=(); named=1 ;;
    " session export -a") cmds=(); opts=(); named=1 ;;
    " session export --user") cmds=(); opts=(); named=1 ;;
    " session export -u") cmds=(); opts=(); named=1 ;;
    " session import --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session upgrade --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session stats --by") cmds=(app user day week age); opts=(); named= ;;
    " session stats --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session stats --app") cmds=(); opts=(); named=1 ;;
    " session stats -a") cmds=(); opts=(); named=1 ;;
    " session stats --user") cmds=(); opts=(); named=1 ;;
    " session stats -u") cmds=(); opts=(); named=1 ;;
    " session watch --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session prune --policy") cmds=(default all custom); opts=(); named= ;;
    " session prune --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session prune --app") cmds=(); opts=(); named=1 ;;
    " session prune -a") cmds=(); opts=(); named=1 ;;
    " session vacuum --time-format") cmds=(compact local iso); opts=(); named= ;;
    " session index --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm save --policy") cmds=(default all custom); opts=(); named= ;;
    " ltm save -p") cmds=(default all custom); opts=(); named= ;;
    " ltm save --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm search --mode") cmds=(vector keyword hybrid); opts=(); named= ;;
    " ltm search -m") cmds=(vector keyword hybrid); opts=(); named= ;;
    " ltm search --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm list --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm profile --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm delete --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm edit --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm show --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm export --backend") cmds=(local mem0 memory opensearch openviking redis tos_context viking); opts=(); named= ;;
    " ltm export -b") cmds=(local mem0 memory opensearch openviking redis tos_context viking); opts=(); named= ;;
    " ltm export --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm export --index") cmds=(); opts=(); named=1 ;;
    " ltm export -i") cmds=(); opts=(); named=1 ;;
    " ltm import --backend") cmds=(local mem0 memory opensearch openviking redis tos_context viking); opts=(); named= ;;
    " ltm import -b") cmds=(local mem0 memory opensearch openviking redis tos_context viking); opts=(); named= ;;
    " ltm import --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm import --index") cmds=(); opts=(); named=1 ;;
    " ltm import -i") cmds=(); opts=(); named=1 ;;
    " ltm copy --from-backend") cmds=(local mem0 memory opensearch openviking redis tos_context viking); opts=(); named= ;;
    " ltm copy --to-backend") cmds=(local mem0 memory opensearch openviking redis tos_context viking); opts=(); named= ;;
    " ltm copy --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm reembed --time-format") cmds=(compact local iso); opts=(); named= ;;
    " ltm sync --policy") cmds=(default all custom); opts=(); named= ;;
    " ltm sync -p") cmds=(default all custom); opts=(); named= ;;
    " ltm sync --time-format") cmds=(compact local iso); opts=(); named= ;;
    " policy test --policy") cmds=(default all custom); opts=(); named= ;;
    " policy test -p") cmds=(default all custom); opts=(); named= ;;
    " policy test --time-format") cmds=(compact local iso); opts=(); named= ;;
    " policy show --time-format") cmds=(compact local iso); opts=(); named= ;;
    " config show --time-format") cmds=(compact local iso); opts=(); named= ;;
    " config init --time-format") cmds=(compact local iso); opts=(); named= ;;
    " config path --time-format") cmds=(compact local iso); opts=(); named= ;;
    " retention show --time-format") cmds=(compact local iso); opts=(); named= ;;
  esac
  if [[ -n "$named" && "$cur" != -* ]]; then
    mapfile -t cmds < <(_VMEM_COMPLETE=complete_bash COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD="$COMP_CWORD" "${COMP_WORDS[0]}" 2>/dev/null)
  fi
  if [[ "$cur" == -* ]]; then words=("${opts[@]}"); else words=("${cmds[@]}"); fi
  COMPREPLY=()
  for w in "${words[@]}"; do
    [[ -n "$w" ]] || continue
    printf -v q "%q" "$w"
    if [[ "$w" == "$cur"* || "$q" == "$cur"* ]]; then COMPREPLY+=("$q"); fi
  done
}
complete -o default -o bashdefault -F _vmem vmem
