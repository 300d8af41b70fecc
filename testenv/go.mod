module berth.dev/testenv

go 1.26
