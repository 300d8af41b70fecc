module berth.dev/billing

go 1.26
