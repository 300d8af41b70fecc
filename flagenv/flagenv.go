// Package flagenv fills the flags a command line did not set from
// environment variables, by one naming rule with explicit aliases, and
// reports what it set for the startup log.
//
// Precedence, per flag: the command line, then the flag's variables in
// order (the first one set and not empty wins), then the flag's default.
// A variable whose value the flag refuses is an error naming the variable.
//
//	rule := flagenv.Rule{
//		Prefix:  "BERTH_", // -max-queued reads BERTH_MAX_QUEUED
//		Aliases: map[string][]string{"database-url": {"DATABASE_URL", "BERTH_DATABASE_URL"}},
//		Skip:    []string{"version"},
//		Secret:  []string{"proxy-secret"},
//	}
//	if err := fs.Parse(args); err != nil { ... }
//	report, err := rule.Apply(fs, os.Getenv)
//	...
//	report.Log(log, os.Environ())
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// Rule says which environment variables fill which flags.
type Rule struct {
	// Prefix names a flag's variable: Prefix and the flag's name in upper
	// case, '-' as '_' (with "BERTH_", -max-queued reads BERTH_MAX_QUEUED).
	Prefix string
	// Aliases lists a flag's variables in the order they are tried; they
	// replace the Prefix name, so list that too where it is also read.
	Aliases map[string][]string
	// Skip lists flags no variable sets (-version: BERTH_VERSION is no
	// switch).
	Skip []string
	// Secret lists flags whose values the report hides. In every flag a
	// URL's user information and a URL's or connection string's
	// secret-looking parameters are hidden (Redact).
	Secret []string
	// Watch is the prefix of the variables Report.Typos looks at; empty
	// means Prefix.
	Watch string
}

// Vars returns the variables that fill flag name, in the order tried;
// none for a skipped flag.
func (r Rule) Vars(name string) []string {
	if slices.Contains(r.Skip, name) {
		return nil
	}
	if v, ok := r.Aliases[name]; ok {
		return v
	}
	return []string{r.Prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// Setting is one flag set from the environment.
type Setting struct {
	Flag  string // without the dash
	Var   string // the variable that set it
	Value string // as it may be logged: secrets and URL credentials hidden (Redact)
}

// Report tells which variables set which flags.
type Report struct {
	Settings []Setting
	known    map[string]string // every variable the rule reads → its flag
	watch    string
}

// Apply sets every flag of fs that the command line did not set (call it
// after fs.Parse) from the first of its variables that getenv returns
// non-empty. Every refused value is reported, each error naming its
// variable and flag; a secret's value is never in the error.
func (r Rule) Apply(fs *flag.FlagSet, getenv func(string) string) (Report, error) {
	rep := Report{known: map[string]string{}, watch: r.Watch}
	if rep.watch == "" {
		rep.watch = r.Prefix
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		vars := r.Vars(f.Name)
		for _, v := range vars {
			rep.known[v] = f.Name
		}
		if set[f.Name] {
			return
		}
		secret := slices.Contains(r.Secret, f.Name)
		for _, v := range vars {
			val := getenv(v)
			if val == "" {
				continue
			}
			if err := f.Value.Set(val); err != nil {
				if secret {
					errs = append(errs, fmt.Errorf("%s: invalid value for flag -%s: %w", v, f.Name, err))
				} else {
					errs = append(errs, fmt.Errorf("%s: invalid value %q for flag -%s: %w", v, loggable(val, false), f.Name, err))
				}
				return
			}
			rep.Settings = append(rep.Settings, Setting{Flag: f.Name, Var: v, Value: loggable(val, secret)})
			return
		}
	})
	return rep, errors.Join(errs...)
}

// Parse parses args into fs, then fills from getenv what the command line
// left unset (Apply). An error from the environment is prefixed "config:",
// one from the command line is the flag package's own, so that
// errors.Is(err, flag.ErrHelp) still holds for -h.
func (r Rule) Parse(fs *flag.FlagSet, args []string, getenv func(string) string) (Report, error) {
	if err := fs.Parse(args); err != nil {
		return Report{}, err
	}
	rep, err := r.Apply(fs, getenv)
	if err != nil {
		return rep, fmt.Errorf("config: %w", err)
	}
	return rep, nil
}

// loggable is val as the startup log may show it (Redact).
func loggable(val string, secret bool) string {
	if secret {
		return Redacted
	}
	return Redact(val)
}

// Log writes the startup report: one Info line naming the variables that
// set flags (values as they may be logged), then one Warn line per likely
// typo among environ's variables (Typos).
func (r Report) Log(log *slog.Logger, environ []string) {
	log.Info("settings from the environment", "env", r)
	for _, t := range r.Typos(environ) {
		log.Warn(t.String(), "var", t.Var, "want", t.Want)
	}
}

// LogValue makes a Report one slog group: each variable that set a flag,
// with its value as it may be logged.
func (r Report) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, len(r.Settings))
	for _, s := range r.Settings {
		attrs = append(attrs, slog.String(s.Var, s.Value))
	}
	return slog.GroupValue(attrs...)
}
