module berth.dev/flagenv

go 1.26
