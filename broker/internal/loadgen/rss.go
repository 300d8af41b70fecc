package loadgen

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// residentKiB returns a process's resident set (VmRSS in
// /proc/PID/status, Linux), in KiB.
func residentKiB(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New("loadgen: no VmRSS in /proc status")
}
