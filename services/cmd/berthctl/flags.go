package main

import (
	"flag"
	"fmt"
	"strings"
)

// flags is a command's flag set with the common flags.
type flags struct {
	*flag.FlagSet
	e      *env
	api    *string
	tenant *string
	json   *bool
	limit  *int  // withPages
	all    *bool // withPages
}

// newFlags makes the flag set of "berthctl NAME"; synopsis follows the
// name in the usage line, example is shown under the flags.
func newFlags(e *env, name, synopsis, example string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	f := &flags{FlagSet: fs, e: e}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: berthctl %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(e.stderr, "\nExample:\n%s\nExit codes: 0 ok, 1 API or network error, 2 usage error, 3 not logged in (401), 4 not found (404).\n", example)
	}
	return f
}

// withAPI adds --api.
func (f *flags) withAPI() *flags {
	f.api = f.String("api", "", "API base URL (env BERTH_API_URL; default the one logged in to, else http://127.0.0.1:8080)")
	return f
}

// withTenant adds --api and --tenant.
func (f *flags) withTenant() *flags {
	f.withAPI()
	f.tenant = f.String("tenant", "", "tenant id or slug (env BERTH_TENANT; default the one chosen at login)")
	return f
}

// withJSON adds --json.
func (f *flags) withJSON() *flags {
	f.json = f.Bool("json", false, "print the API's JSON instead of a table")
	return f
}

// parse parses args, allowing flags after positional arguments, and
// checks the number of positional arguments is within [min, max]
// (max < 0: any).
func (f *flags) parse(args []string, min, max int) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			return nil, &usageError{} // the flag package printed why
		}
		args = f.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < min || (max >= 0 && len(pos) > max) {
		f.Usage()
		switch {
		case len(pos) < min:
			return nil, usagef("%s: missing argument", f.Name())
		default:
			return nil, usagef("%s: unexpected argument %q", f.Name(), pos[len(pos)-1])
		}
	}
	return pos, nil
}

// listFlag is a repeatable string flag; each value may hold several,
// comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
