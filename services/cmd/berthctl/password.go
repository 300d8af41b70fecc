package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// passwordFlags are signup's and login's ways to give a password.
type passwordFlags struct {
	password *string
	stdin    *bool
}

func addPasswordFlags(f *flags) *passwordFlags {
	return &passwordFlags{
		password: f.String("password", "", "the password (visible in ps and shell history: prefer the prompt or --password-stdin; env BERTH_PASSWORD)"),
		stdin:    f.Bool("password-stdin", false, "read the password from standard input (all of it, less a trailing newline)"),
	}
}

// maxPasswordInput bounds what --password-stdin reads; the API takes 256 bytes.
const maxPasswordInput = 4096

// read returns the password from --password, --password-stdin,
// BERTH_PASSWORD, a prompt with echo off when stdin is a terminal (twice
// when confirm), or else a line of stdin.
func (p *passwordFlags) read(e *env, confirm bool) (string, error) {
	switch {
	case *p.password != "" && *p.stdin:
		return "", usagef("give --password or --password-stdin, not both")
	case *p.password != "":
		return *p.password, nil
	case *p.stdin:
		b, err := io.ReadAll(io.LimitReader(e.stdin, maxPasswordInput))
		if err != nil {
			return "", fmt.Errorf("read the password from stdin: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return "", usagef("--password-stdin: standard input held no password")
		}
		return pw, nil
	case e.getenv("BERTH_PASSWORD") != "":
		return e.getenv("BERTH_PASSWORD"), nil
	}
	if tty, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(tty.Fd())) {
		return promptPassword(e, int(tty.Fd()), confirm)
	}
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		if err != nil {
			return "", usagef("no password: give --password-stdin (or --password, or BERTH_PASSWORD), or run on a terminal to be asked")
		}
		return "", usagef("empty password")
	}
	return line, nil
}

// promptPassword asks on stderr and reads from the terminal fd with echo
// off; when confirm, it asks again and the two must match.
func promptPassword(e *env, fd int, confirm bool) (string, error) {
	ask := func(prompt string) (string, error) {
		fmt.Fprint(e.stderr, prompt)
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(e.stderr) // the newline the terminal did not echo
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		return string(b), nil
	}
	pw, err := ask("Password: ")
	if err != nil {
		return "", err
	}
	if pw == "" {
		return "", usagef("empty password")
	}
	if confirm {
		again, err := ask("Password (again): ")
		if err != nil {
			return "", err
		}
		if again != pw {
			return "", usagef("the passwords do not match")
		}
	}
	return pw, nil
}
