module berth.dev/gateway

go 1.26
