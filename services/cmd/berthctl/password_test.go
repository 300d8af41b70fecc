package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/testenv"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: the master (the user's side) and the
// terminal a program reads.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	var n int
	rc, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Control(func(fd uintptr) {
		if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
			n, err = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// typeWhenAsked waits until stderr ends with prompt and the terminal's
// echo is off (the program is reading a secret), then types line.
func typeWhenAsked(t *testing.T, master, tty *os.File, stderr *testenv.LogBuffer, prompt, line string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(stderr.String(), prompt) && tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q prompt with echo off; stderr %q", prompt, stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling the terminal's mode: nothing signals it
	}
	if _, err := master.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
}

// terminalShows is what the terminal displayed (its echo), read from the
// master until it has nothing more.
func terminalShows(t *testing.T, master *os.File) string {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for range 100 {
		_ = master.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := master.Read(buf)
		out.Write(buf[:n])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out.String()
}

// On a terminal, signup without --password asks twice with echo off (the
// terminal never shows it), and login asks once; the account works.
func TestPasswordPromptOnATerminal(t *testing.T) {
	url := api(t)
	dir := t.TempDir()
	master, tty := openPTY(t)
	vars := map[string]string{"BERTH_CONFIG": filepath.Join(dir, "config.json"), "BERTH_API_URL": url}
	const pw = "a secret typed at the prompt"
	cli := func(args []string, answers ...[2]string) (int, string) {
		var stdout, stderr testenv.LogBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(context.Background(), args, &env{stdin: tty, stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return vars[k] }})
		}()
		for _, a := range answers {
			typeWhenAsked(t, master, tty, &stderr, a[0], a[1])
		}
		select {
		case code := <-done:
			return code, stdout.String() + stderr.String()
		case <-time.After(30 * time.Second):
			t.Fatalf("%v did not end; output %q", args, stdout.String()+stderr.String())
		}
		return 0, ""
	}

	if code, out := cli([]string{"signup", "--email", "tty@example.com"}, [2]string{"Password: ", pw}, [2]string{"Password (again): ", pw + "!"}); code != exitUsage || !strings.Contains(out, "do not match") {
		t.Fatalf("signup with two different passwords: exit %d %q, want 2", code, out)
	}
	if code, out := cli([]string{"signup", "--email", "tty@example.com"}, [2]string{"Password: ", pw}, [2]string{"Password (again): ", pw}); code != 0 {
		t.Fatalf("signup: exit %d %q", code, out)
	}
	if code, out := cli([]string{"login", "--email", "tty@example.com"}, [2]string{"Password: ", pw}); code != 0 || !strings.Contains(out, "Logged in") {
		t.Fatalf("login: exit %d %q", code, out)
	}
	if shown := terminalShows(t, master); strings.Contains(shown, "secret") {
		t.Fatalf("the terminal showed the password: %q", shown)
	}
}

// --password-stdin reads the password from stdin (all of it, less the
// trailing newline); with --password too, or with nothing on stdin, it is
// a usage error. Off a terminal without it, a line of stdin is the password.
func TestPasswordStdin(t *testing.T) {
	url := api(t)
	dir := t.TempDir()
	vars := map[string]string{"BERTH_CONFIG": filepath.Join(dir, "config.json"), "BERTH_API_URL": url}
	cli := func(stdin string, args ...string) (int, string) {
		var o, e bytes.Buffer
		code := run(context.Background(), args, &env{stdin: strings.NewReader(stdin), stdout: &o, stderr: &e, getenv: func(k string) string { return vars[k] }})
		return code, o.String() + e.String()
	}
	if code, out := cli("correct horse battery\n", "signup", "--email", "pipe@example.com", "--password-stdin"); code != 0 {
		t.Fatalf("signup --password-stdin: exit %d %q", code, out)
	}
	if code, out := cli("correct horse battery\r\n", "login", "--email", "pipe@example.com", "--password-stdin"); code != 0 {
		t.Fatalf("login --password-stdin: exit %d %q", code, out)
	}
	if code, out := cli("correct horse battery\n", "login", "--email", "pipe@example.com"); code != 0 {
		t.Fatalf("login with the password piped: exit %d %q", code, out)
	}
	if code, out := cli("x", "login", "--email", "pipe@example.com", "--password-stdin", "--password", "y"); code != exitUsage {
		t.Fatalf("both: exit %d %q, want 2", code, out)
	}
	if code, out := cli("", "login", "--email", "pipe@example.com", "--password-stdin"); code != exitUsage || !strings.Contains(out, "no password") {
		t.Fatalf("empty stdin: exit %d %q, want 2", code, out)
	}
	if code, out := cli("wrong password!\n", "login", "--email", "pipe@example.com", "--password-stdin"); code != exitAuth {
		t.Fatalf("wrong password: exit %d %q, want 3", code, out)
	}
}
