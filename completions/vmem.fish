# fish completion for vmem; generated from the vmem app by `python -m veadk_mem.cli.docs`; do not edit.
# Install: copy to ~/.config/fish/completions/vmem.fish
function __vmem_path
    set -l tokens (commandline -opc)
    set -l path
    for t in $tokens[2..-1]
        switch (string join ' ' $path $t)
            case 'doctor'
                set path $path $t
            case 'forget'
                set path $path $t
            case 'session'
                set path $path $t
            case 'session list'
                set path $path $t
            case 'session get'
                set path $path $t
            case 'session delete'
                set path $path $t
            case 'session export'
                set path $path $t
            case 'session import'
                set path $path $t
            case 'ltm'
                set path $path $t
            case 'ltm save'
                set path $path $t
            case 'ltm search'
                set path $path $t
            case 'ltm list'
                set path $path $t
            case 'ltm profile'
                set path $path $t
            case 'ltm delete'
                set path $path $t
            case 'policy'
                set path $path $t
            case 'policy test'
                set path $path $t
            case 'policy show'
                set path $path $t
            case 'config'
                set path $path $t
            case 'config show'
                set path $path $t
            case 'config init'
                set path $path $t
            case 'config path'
                set path $path $t
        end
    end
    string join ' ' $path
end
function __vmem_at
    set -l p (__vmem_path)
    test "$p" = "$argv[1]"
end
complete -c vmem -f
complete -c vmem -n "__vmem_at ''" -a 'doctor' -d 'Check the reachability of every configured store; exit 1 when one fails.'
complete -c vmem -n "__vmem_at ''" -a 'forget' -d 'Remove a user\'s sessions and memories everywhere.'
complete -c vmem -n "__vmem_at ''" -a 'session' -d 'Inspect, clean, back up and migrate ADK session databases.'
complete -c vmem -n "__vmem_at ''" -a 'ltm' -d 'Save sessions into long-term memory, search and manage it.'
complete -c vmem -n "__vmem_at ''" -a 'policy' -d 'Dry-run and show VeADK auto-save memory policies.'
complete -c vmem -n "__vmem_at ''" -a 'config' -d 'Show and create vmem configuration.'
complete -c vmem -n "__vmem_at ''" -l 'config' -d 'TOML config file (else $VMEM_CONFIG, ./vmem.toml, XDG).'
complete -c vmem -n "__vmem_at ''" -s 'c' -d 'TOML config file (else $VMEM_CONFIG, ./vmem.toml, XDG).'
complete -c vmem -n "__vmem_at ''" -l 'json' -d 'Print stable JSON on stdout.'
complete -c vmem -n "__vmem_at ''" -l 'quiet' -d 'Only data and errors; no progress or notes.'
complete -c vmem -n "__vmem_at ''" -s 'q' -d 'Only data and errors; no progress or notes.'
complete -c vmem -n "__vmem_at ''" -l 'verbose' -d 'Tracebacks and extra detail on errors.'
complete -c vmem -n "__vmem_at ''" -s 'v' -d 'Tracebacks and extra detail on errors.'
complete -c vmem -n "__vmem_at ''" -l 'version' -d 'Print the version and exit.'
complete -c vmem -n "__vmem_at 'doctor'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'forget'" -l 'app' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'forget'" -s 'a' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'forget'" -l 'db-url' -d 'SQLAlchemy URL or sqlite file path; wins over config and environment.'
complete -c vmem -n "__vmem_at 'forget'" -l 'dry-run' -d 'List what would go from where; delete nothing.'
complete -c vmem -n "__vmem_at 'forget'" -l 'yes' -d 'Do not ask for confirmation.'
complete -c vmem -n "__vmem_at 'forget'" -s 'y' -d 'Do not ask for confirmation.'
complete -c vmem -n "__vmem_at 'forget'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'forget'" -F
complete -c vmem -n "__vmem_at 'session'" -a 'list' -d 'List sessions, most recently updated first, with event counts (events are not loaded).'
complete -c vmem -n "__vmem_at 'session'" -a 'get' -d 'Show a session: merged state and its event timeline; --json prints ADK\'s session JSON.'
complete -c vmem -n "__vmem_at 'session'" -a 'delete' -d 'Delete sessions with their events, by id or by filter, in one transaction.'
complete -c vmem -n "__vmem_at 'session'" -a 'export' -d 'Export sessions as JSONL (one ADK session per line, plus app/user state records), streamed.'
complete -c vmem -n "__vmem_at 'session'" -a 'import' -d 'Import sessions (upsert, all-or-nothing per session); the whole file is checked before anything is written.'
complete -c vmem -n "__vmem_at 'session list'" -l 'app' -d 'Only this app.'
complete -c vmem -n "__vmem_at 'session list'" -l 'user' -d 'Only this user.'
complete -c vmem -n "__vmem_at 'session list'" -l 'since' -d 'Updated at or after: ISO date/time (UTC) or a duration ago (7d).'
complete -c vmem -n "__vmem_at 'session list'" -l 'until' -d 'Updated before: ISO date/time (UTC) or a duration ago.'
complete -c vmem -n "__vmem_at 'session list'" -l 'limit' -d 'At most this many (0: all).'
complete -c vmem -n "__vmem_at 'session list'" -l 'offset' -d 'Skip this many first.'
complete -c vmem -n "__vmem_at 'session list'" -l 'db-url' -d 'SQLAlchemy URL or sqlite file path; wins over config and environment.'
complete -c vmem -n "__vmem_at 'session list'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'session get'" -l 'events' -d 'Only the last N events.'
complete -c vmem -n "__vmem_at 'session get'" -l 'db-url' -d 'SQLAlchemy URL or sqlite file path; wins over config and environment.'
complete -c vmem -n "__vmem_at 'session get'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'session get'" -F
complete -c vmem -n "__vmem_at 'session delete'" -l 'app' -d 'Only this app.'
complete -c vmem -n "__vmem_at 'session delete'" -l 'user' -d 'Only this user.'
complete -c vmem -n "__vmem_at 'session delete'" -l 'older-than' -d 'Only sessions not updated for this long (30d, 12h).'
complete -c vmem -n "__vmem_at 'session delete'" -l 'purge-state' -d 'Also delete user/app state left without any session.'
complete -c vmem -n "__vmem_at 'session delete'" -l 'dry-run' -d 'Show what would be deleted; change nothing.'
complete -c vmem -n "__vmem_at 'session delete'" -l 'yes' -d 'Do not ask for confirmation.'
complete -c vmem -n "__vmem_at 'session delete'" -s 'y' -d 'Do not ask for confirmation.'
complete -c vmem -n "__vmem_at 'session delete'" -l 'db-url' -d 'SQLAlchemy URL or sqlite file path; wins over config and environment.'
complete -c vmem -n "__vmem_at 'session delete'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'session delete'" -F
complete -c vmem -n "__vmem_at 'session export'" -l 'app' -d 'Only this app.'
complete -c vmem -n "__vmem_at 'session export'" -l 'user' -d 'Only this user.'
complete -c vmem -n "__vmem_at 'session export'" -l 'since' -d 'Updated at or after: ISO date/time (UTC) or a duration ago (7d).'
complete -c vmem -n "__vmem_at 'session export'" -l 'until' -d 'Updated before: ISO date/time (UTC) or a duration ago.'
complete -c vmem -n "__vmem_at 'session export'" -l 'output' -d 'Write to FILE instead of stdout.'
complete -c vmem -n "__vmem_at 'session export'" -s 'o' -d 'Write to FILE instead of stdout.'
complete -c vmem -n "__vmem_at 'session export'" -l 'db-url' -d 'SQLAlchemy URL or sqlite file path; wins over config and environment.'
complete -c vmem -n "__vmem_at 'session import'" -l 'force' -d 'Write sessions the database holds in a newer version than the file\'s.'
complete -c vmem -n "__vmem_at 'session import'" -l 'db-url' -d 'SQLAlchemy URL or sqlite file path; wins over config and environment.'
complete -c vmem -n "__vmem_at 'session import'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'session import'" -F
complete -c vmem -n "__vmem_at 'ltm'" -a 'save' -d 'Save sessions\' memories through the save policy.'
complete -c vmem -n "__vmem_at 'ltm'" -a 'search' -d 'Semantic search over a user\'s memories.'
complete -c vmem -n "__vmem_at 'ltm'" -a 'list' -d 'A user\'s memories, newest first.'
complete -c vmem -n "__vmem_at 'ltm'" -a 'profile' -d 'The backend\'s profile of a user.'
complete -c vmem -n "__vmem_at 'ltm'" -a 'delete' -d 'Delete a user\'s memories.'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'from-store' -d 'Read sessions from the session database instead of files.'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'app' -d 'With --from-store: every session of this app.'
complete -c vmem -n "__vmem_at 'ltm save'" -s 'a' -d 'With --from-store: every session of this app.'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'user' -d 'With --from-store --app: only this user.'
complete -c vmem -n "__vmem_at 'ltm save'" -s 'u' -d 'With --from-store --app: only this user.'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'since' -d 'With --from-store --app: sessions updated since (ISO time or 7d).'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'db-url' -d 'SQLAlchemy URL or sqlite file path; wins over config and environment.'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'policy' -d 'Preset, [policy.NAME], JSON/TOML file or inline JSON.'
complete -c vmem -n "__vmem_at 'ltm save'" -s 'p' -d 'Preset, [policy.NAME], JSON/TOML file or inline JSON.'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'include-assistant' -d 'Keep assistant text events too (as openviking does).'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'dry-run' -d 'Show what would be saved; change nothing.'
complete -c vmem -n "__vmem_at 'ltm save'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'ltm save'" -F
complete -c vmem -n "__vmem_at 'ltm search'" -l 'user' -d 'The user whose memories to use (required).'
complete -c vmem -n "__vmem_at 'ltm search'" -s 'u' -d 'The user whose memories to use (required).'
complete -c vmem -n "__vmem_at 'ltm search'" -l 'app' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'ltm search'" -s 'a' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'ltm search'" -l 'top-k' -d 'Memories to return (default: top_k).'
complete -c vmem -n "__vmem_at 'ltm search'" -s 'k' -d 'Memories to return (default: top_k).'
complete -c vmem -n "__vmem_at 'ltm search'" -l 'min-score' -d 'Drop results scoring below this.'
complete -c vmem -n "__vmem_at 'ltm search'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'ltm search'" -F
complete -c vmem -n "__vmem_at 'ltm list'" -l 'user' -d 'The user whose memories to use (required).'
complete -c vmem -n "__vmem_at 'ltm list'" -s 'u' -d 'The user whose memories to use (required).'
complete -c vmem -n "__vmem_at 'ltm list'" -l 'app' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'ltm list'" -s 'a' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'ltm list'" -l 'limit' -d 'Show at most N, newest first.'
complete -c vmem -n "__vmem_at 'ltm list'" -s 'n' -d 'Show at most N, newest first.'
complete -c vmem -n "__vmem_at 'ltm list'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'ltm profile'" -l 'app' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'ltm profile'" -s 'a' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'ltm profile'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'ltm profile'" -F
complete -c vmem -n "__vmem_at 'ltm delete'" -l 'user' -d 'The user whose memories to use (required).'
complete -c vmem -n "__vmem_at 'ltm delete'" -s 'u' -d 'The user whose memories to use (required).'
complete -c vmem -n "__vmem_at 'ltm delete'" -l 'id' -d 'Memory id to delete (repeatable).'
complete -c vmem -n "__vmem_at 'ltm delete'" -l 'session' -d 'Delete memories saved from this session.'
complete -c vmem -n "__vmem_at 'ltm delete'" -s 's' -d 'Delete memories saved from this session.'
complete -c vmem -n "__vmem_at 'ltm delete'" -l 'all' -d 'Delete every memory of the user in the index.'
complete -c vmem -n "__vmem_at 'ltm delete'" -l 'app' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'ltm delete'" -s 'a' -d 'App name; picks the index when long_term_memory.index is empty.'
complete -c vmem -n "__vmem_at 'ltm delete'" -l 'dry-run' -d 'List what would be deleted; delete nothing.'
complete -c vmem -n "__vmem_at 'ltm delete'" -l 'yes' -d 'Do not ask for confirmation.'
complete -c vmem -n "__vmem_at 'ltm delete'" -s 'y' -d 'Do not ask for confirmation.'
complete -c vmem -n "__vmem_at 'ltm delete'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'policy'" -a 'test' -d 'What VeADK would save from a session, and why.'
complete -c vmem -n "__vmem_at 'policy'" -a 'show' -d 'Print a resolved policy, field by field.'
complete -c vmem -n "__vmem_at 'policy test'" -l 'from-store' -d 'Read the session APP USER ID from the session database.'
complete -c vmem -n "__vmem_at 'policy test'" -l 'db-url' -d 'SQLAlchemy URL or sqlite file path; wins over config and environment.'
complete -c vmem -n "__vmem_at 'policy test'" -l 'policy' -d 'Preset (default, all, custom), a [policy.NAME] from the config, a JSON/TOML file, or inline JSON. Default: [policy] default of the config.'
complete -c vmem -n "__vmem_at 'policy test'" -s 'p' -d 'Preset (default, all, custom), a [policy.NAME] from the config, a JSON/TOML file, or inline JSON. Default: [policy] default of the config.'
complete -c vmem -n "__vmem_at 'policy test'" -l 'include-assistant' -d 'Add the assistant role to the default preset, as VeADK does for openviking.'
complete -c vmem -n "__vmem_at 'policy test'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'policy test'" -F
complete -c vmem -n "__vmem_at 'policy show'" -l 'include-assistant' -d 'Add the assistant role to the default preset, as VeADK does for openviking.'
complete -c vmem -n "__vmem_at 'policy show'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'policy show'" -F
complete -c vmem -n "__vmem_at 'config'" -a 'show' -d 'Print every effective setting with its source; secrets are masked.'
complete -c vmem -n "__vmem_at 'config'" -a 'init' -d 'Write a commented starter config holding every key at its default.'
complete -c vmem -n "__vmem_at 'config'" -a 'path' -d 'Print the config file in use and the places vmem looks for one.'
complete -c vmem -n "__vmem_at 'config show'" -l 'json' -d 'Print JSON on stdout.'
complete -c vmem -n "__vmem_at 'config init'" -l 'force' -d 'Overwrite an existing file.'
complete -c vmem -n "__vmem_at 'config init'" -F
complete -c vmem -n "__vmem_at 'config path'" -l 'json' -d 'Print JSON on stdout.'
