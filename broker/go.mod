module berth.dev/broker

go 1.26
