module berth.dev/e2e

go 1.26
