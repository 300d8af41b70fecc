module berth.dev/services

go 1.26
