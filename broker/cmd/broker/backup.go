package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"berth.dev/broker/internal/backup"
	"berth.dev/flagenv"
)

// `broker backup` copies a node's data directory while the node runs;
// `broker restore` puts such a copy into an empty data directory for a
// node to start on (package backup, docs/operations.md).
//
//	broker backup -data /var/lib/berth -out /backup/node-0-20261201
//	broker restore -from /backup/node-0-20261201 -data /var/lib/berth
//
// -data also comes from BERTH_DATA (the node's own variable), the other
// flags from BERTH_BACKUP_<FLAG> / BERTH_RESTORE_<FLAG>. Exit status: 0
// done, 1 failed, 2 usage.

// runBackup runs broker backup (restore false) or broker restore with args
// (after the subcommand) and returns the exit status.
func runBackup(restore bool, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	name, prefix, srcFlag, dstFlag := "broker backup", "BERTH_BACKUP_", "data", "out"
	if restore {
		name, prefix, srcFlag, dstFlag = "broker restore", "BERTH_RESTORE_", "from", "data"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var src, dst string
	if restore {
		fs.StringVar(&src, srcFlag, "", "the backup directory (written by broker backup)")
		fs.StringVar(&dst, dstFlag, "", "the node's data directory to create; must not exist or be empty")
	} else {
		fs.StringVar(&src, srcFlag, "", "the node's data directory (its -data), the node may be running")
		fs.StringVar(&dst, dstFlag, "", "the backup directory to create; must not exist or be empty")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rule := flagenv.Rule{Prefix: prefix, Aliases: map[string][]string{"data": {prefix + "DATA", "BERTH_DATA"}}}
	if _, err := rule.Apply(fs, getenv); err != nil {
		fmt.Fprintln(stderr, name+":", err)
		return 2
	}
	if fs.NArg() > 0 || src == "" || dst == "" {
		fmt.Fprintf(stderr, "%s: -%s and -%s are required, and nothing else\n", name, srcFlag, dstFlag)
		fs.Usage()
		return 2
	}
	start := time.Now()
	var st backup.Stats
	var err error
	if restore {
		st, err = backup.Restore(src, dst)
	} else {
		st, err = backup.Copy(src, dst)
	}
	if err != nil {
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
	if restore {
		fmt.Fprintf(stdout, "restored %s into %s: %d tenant stores, %d files, %d bytes (%v)\n", src, dst, st.Tenants, st.Files, st.Bytes, time.Since(start).Round(time.Millisecond))
	} else {
		fmt.Fprintf(stdout, "backed up %s into %s: %d files, %d bytes, started %s (%v)\n", src, dst, st.Files, st.Bytes, start.UTC().Format(time.RFC3339Nano), time.Since(start).Round(time.Millisecond))
	}
	return 0
}
