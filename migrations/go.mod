module berth.dev/migrations

go 1.26
