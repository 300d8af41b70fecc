package main

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
)

func runCompletion(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "completion", "bash|zsh|fish",
		"  source <(berthctl completion bash)         # bash; or > /etc/bash_completion.d/berthctl\n"+
			"  source <(berthctl completion zsh)          # zsh, after compinit; or > \"${fpath[1]}/_berthctl\"\n"+
			"  berthctl completion fish > ~/.config/fish/completions/berthctl.fish")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	switch pos[0] {
	case "bash":
		fmt.Fprint(e.stdout, bashCompletion())
	case "zsh":
		fmt.Fprint(e.stdout, zshCompletion())
	case "fish":
		fmt.Fprint(e.stdout, fishCompletion())
	default:
		return usagef("completion: %q is not one of bash, zsh, fish", pos[0])
	}
	return nil
}

// subcommandNames are the second words of the grouped commands, the
// default one first.
func subcommandNames() [][2]string {
	return [][2]string{
		{"tenants", "list create use"}, {"credentials", "list create token revoke"}, {"quotas", "get set"},
		{"topics", "list create delete"}, {"sessions", "list kick"}, {"traces", "list show"}, {"invoices", "list show"}, {"completion", "bash zsh fish"}, {"node", "drain rebalance"},
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

// flagDoc is one flag as `berthctl CMD -h` lists it.
type flagDoc struct {
	name, usage string
	value       bool // takes a value (not a boolean)
}

// commandFlags runs `berthctl words... -h` and reads its flags back, so
// the static scripts (zsh, fish) list exactly what the commands parse.
func commandFlags(words ...string) []flagDoc {
	var out bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	run(context.Background(), append(words, "-h"), e)
	var docs []flagDoc
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "  -") {
			continue
		}
		head, usage, sameLine := strings.Cut(strings.TrimPrefix(l, "  -"), "\t") // "-x\tusage": a one-letter boolean
		name, typ, _ := strings.Cut(head, " ")
		d := flagDoc{name: name, value: typ != "", usage: strings.TrimSpace(usage)}
		if !sameLine && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t") {
			d.usage = strings.TrimSpace(lines[i+1])
		}
		docs = append(docs, d)
	}
	return docs
}

// completionTargets are the commands and "group sub" pairs whose flags
// the scripts list: key (as the user types it) → words to run.
func completionTargets() [][]string {
	groups := map[string][]string{}
	for _, cs := range subcommandNames() {
		groups[cs[0]] = strings.Fields(cs[1])
	}
	var out [][]string
	for _, c := range commands() {
		subs, ok := groups[c.name]
		if !ok {
			out = append(out, []string{c.name})
			continue
		}
		if c.name == "completion" {
			out = append(out, []string{c.name, subs[0]})
			continue
		}
		for _, s := range subs {
			out = append(out, []string{c.name, s})
		}
	}
	return out
}

// zshQuote quotes s for a zsh single-quoted word holding "name:description".
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func zshItem(name, desc string) string {
	return zshQuote(strings.ReplaceAll(name, ":", `\:`) + ":" + desc)
}

func zshCompletion() string {
	var b strings.Builder
	b.WriteString(`#compdef berthctl
# zsh completion for berthctl: source <(berthctl completion zsh) after
# compinit, or save it as _berthctl in a directory of $fpath.
_berthctl() {
	local -a items
	if (( CURRENT == 2 )); then
		items=(
`)
	for _, c := range commands() {
		fmt.Fprintf(&b, "\t\t\t%s\n", zshItem(c.name, c.summary))
	}
	fmt.Fprintf(&b, "\t\t\t%s\n\t\t)\n\t\t_describe command items\n\t\treturn\n\tfi\n", zshItem("help", "the commands, or help COMMAND for one's flags"))
	groups := map[string]string{}
	var groupNames []string
	for _, cs := range subcommandNames() {
		groups[cs[0]] = strings.Fields(cs[1])[0]
		groupNames = append(groupNames, cs[0])
	}
	fmt.Fprintf(&b, `	local key=${words[2]}
	case $key in
	%s) (( CURRENT > 3 )) && [[ ${words[3]} != -* ]] && key="$key ${words[3]}" ;;
	esac
	if [[ ${words[CURRENT]} == -* ]]; then
		case $key in
`, strings.Join(groupNames, "|"))
	for _, t := range completionTargets() {
		keys := []string{zshQuote(strings.Join(t, " "))}
		if len(t) == 2 && groups[t[0]] == t[1] {
			keys = append(keys, zshQuote(t[0])) // the group without a subcommand runs its default
		}
		fmt.Fprintf(&b, "\t\t%s) items=(", strings.Join(keys, "|"))
		for _, f := range commandFlags(t...) {
			fmt.Fprintf(&b, " %s", zshItem("--"+f.name, f.usage))
		}
		b.WriteString(" ) ;;\n")
	}
	b.WriteString("\t\t*) return 1 ;;\n\t\tesac\n\t\t_describe flag items\n\t\treturn\n\tfi\n")
	b.WriteString("\tif (( CURRENT == 3 )); then\n\t\tcase ${words[2]} in\n")
	for _, cs := range subcommandNames() {
		fmt.Fprintf(&b, "\t\t%s) items=(%s) ;;\n", cs[0], cs[1])
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	fmt.Fprintf(&b, "\t\thelp) items=(%s) ;;\n", strings.Join(names, " "))
	b.WriteString(`		*) return 1 ;;
		esac
		compadd -a items
	fi
}
if [[ ${funcstack[1]} == _berthctl ]]; then
	_berthctl "$@"
else
	compdef _berthctl berthctl
fi
`)
	return b.String()
}

// fishQuote quotes s for fish.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func fishCompletion() string {
	var b strings.Builder
	b.WriteString("# fish completion for berthctl: berthctl completion fish > ~/.config/fish/completions/berthctl.fish\n")
	b.WriteString("complete -c berthctl -f\n")
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
		fmt.Fprintf(&b, "complete -c berthctl -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	fmt.Fprintf(&b, "complete -c berthctl -n __fish_use_subcommand -a help -d %s\n", fishQuote("the commands, or help COMMAND for one's flags"))
	fmt.Fprintf(&b, "complete -c berthctl -n '__fish_seen_subcommand_from help' -a %s\n", fishQuote(strings.Join(names, " ")))
	subsOf := map[string][]string{}
	for _, cs := range subcommandNames() {
		subs := strings.Fields(cs[1])
		subsOf[cs[0]] = subs
		fmt.Fprintf(&b, "complete -c berthctl -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a %s\n",
			cs[0], cs[1], fishQuote(cs[1]))
	}
	for _, t := range completionTargets() {
		cond := "__fish_seen_subcommand_from " + t[0]
		if subs := subsOf[t[0]]; len(t) == 2 && t[0] != "completion" {
			others := make([]string, 0, len(subs))
			for _, s := range subs {
				if s != t[1] {
					others = append(others, s)
				}
			}
			sort.Strings(others)
			if t[1] == subs[0] { // the default: also when no subcommand is given
				cond += "; and not __fish_seen_subcommand_from " + strings.Join(others, " ")
			} else {
				cond += "; and __fish_seen_subcommand_from " + t[1]
			}
		}
		for _, f := range commandFlags(t...) {
			opt := "-l " + f.name
			if len(f.name) == 1 {
				opt = "-s " + f.name
			}
			if f.value {
				opt += " -r"
			}
			fmt.Fprintf(&b, "complete -c berthctl -n %s %s -d %s\n", fishQuote(cond), opt, fishQuote(f.usage))
		}
	}
	return b.String()
}
