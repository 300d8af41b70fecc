module berth.dev/e2e

go 1.26.0

replace berth.dev/testenv => ../testenv

replace berth.dev/migrations => ../migrations

require berth.dev/testenv v0.0.0

require (
	github.com/eclipse/paho.golang v0.23.0 // indirect
	github.com/eclipse/paho.mqtt.golang v1.5.1 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	golang.org/x/net v0.44.0
	golang.org/x/sync v0.25.0 // indirect
)
