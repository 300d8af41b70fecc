// Package e2e holds Berth's end-to-end tests: real api, broker node and
// gateway processes built from this checkout, real Postgres and Redis, and
// real MQTT clients (paho 3.1.1 and 5.0, mosquitto_pub/mosquitto_sub).
package e2e
