module berth.dev/quotas

go 1.26
