package main

import (
	"context"
	"fmt"
	"strings"
)

func runCompletion(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "completion", "bash", "  source <(berthctl completion bash)\n  berthctl completion bash > /etc/bash_completion.d/berthctl")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if pos[0] != "bash" {
		return usagef("completion: only bash is supported, not %q", pos[0])
	}
	fmt.Fprint(e.stdout, bashCompletion())
	return nil
}

// subcommandNames are the second words of the grouped commands.
func subcommandNames() [][2]string {
	return [][2]string{
		{"tenants", "list create use"}, {"credentials", "list create token revoke"}, {"quotas", "get set"},
		{"topics", "list create delete"}, {"sessions", "list kick"}, {"traces", "list show"}, {"invoices", "list show"}, {"completion", "bash"},
	}
}

func bashCompletion() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	names = append(names, "help")
	var cases strings.Builder
	for _, cs := range subcommandNames() {
		fmt.Fprintf(&cases, "\t\t%s) words=%q ;;\n", cs[0], cs[1])
	}
	return fmt.Sprintf(`# bash completion for berthctl: source <(berthctl completion bash)
_berthctl() {
	local cur=${COMP_WORDS[COMP_CWORD]} words
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W %q -- "$cur"))
		return
	fi
	if [[ $cur == -* ]]; then
		local cmd=("${COMP_WORDS[1]}")
		[ "$COMP_CWORD" -gt 2 ] && [[ ${COMP_WORDS[2]} != -* ]] && cmd+=("${COMP_WORDS[2]}")
		COMPREPLY=($(compgen -W "$(berthctl "${cmd[@]}" -h 2>&1 | sed -n 's/^  \(-[a-z-]*\).*/-\1/p')" -- "$cur"))
		return
	fi
	if [ "$COMP_CWORD" -eq 2 ]; then
		case ${COMP_WORDS[1]} in
%s		help) words=%q ;;
		*) return ;;
		esac
		COMPREPLY=($(compgen -W "$words" -- "$cur"))
	fi
}
complete -F _berthctl berthctl
`, strings.Join(names, " "), cases.String(), strings.Join(names, " "))
}
