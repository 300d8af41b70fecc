module berth.dev/web

go 1.26
