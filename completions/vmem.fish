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
            case 'ltm'
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
complete -c vmem -n "__vmem_at ''" -a 'forget' -d 'Remove a user\'s sessions and memories everywhere (right to be forgotten).'
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
complete -c vmem -n "__vmem_at 'doctor'" -l 'json' -d 'Print JSON.'
complete -c vmem -n "__vmem_at 'forget'" -F
complete -c vmem -n "__vmem_at 'policy'" -a 'test' -d 'What VeADK would save from a session, and why.'
complete -c vmem -n "__vmem_at 'policy'" -a 'show' -d 'Print a resolved policy, field by field.'
complete -c vmem -n "__vmem_at 'policy test'" -l 'policy' -d 'Preset (default, all, custom), a [policy.NAME] from the config, a JSON/TOML file, or inline JSON. Default: [policy] default of the config.'
complete -c vmem -n "__vmem_at 'policy test'" -s 'p' -d 'Preset (default, all, custom), a [policy.NAME] from the config, a JSON/TOML file, or inline JSON. Default: [policy] default of the config.'
complete -c vmem -n "__vmem_at 'policy test'" -l 'include-assistant' -d 'Add the assistant role to the default preset, as VeADK does for openviking.'
complete -c vmem -n "__vmem_at 'policy test'" -l 'json' -d 'Print JSON.'
complete -c vmem -n "__vmem_at 'policy test'" -F
complete -c vmem -n "__vmem_at 'policy show'" -l 'include-assistant' -d 'Add the assistant role to the default preset, as VeADK does for openviking.'
complete -c vmem -n "__vmem_at 'policy show'" -l 'json' -d 'Print JSON.'
complete -c vmem -n "__vmem_at 'policy show'" -F
complete -c vmem -n "__vmem_at 'config'" -a 'show' -d 'Print every effective setting with its source; secrets are masked.'
complete -c vmem -n "__vmem_at 'config'" -a 'init' -d 'Write a commented starter config holding every key at its default.'
complete -c vmem -n "__vmem_at 'config'" -a 'path' -d 'Print the config file in use and the places vmem looks for one.'
complete -c vmem -n "__vmem_at 'config show'" -l 'json' -d 'Print JSON.'
complete -c vmem -n "__vmem_at 'config init'" -l 'force' -d 'Overwrite an existing file.'
complete -c vmem -n "__vmem_at 'config init'" -F
complete -c vmem -n "__vmem_at 'config path'" -l 'json' -d 'Print JSON.'
