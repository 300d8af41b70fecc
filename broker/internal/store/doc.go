// Package store is the persistence boundary of one tenant shard: the
// retained messages and the persistent sessions a shard must find again
// after a restart. The shard talks only to the Store interface; Memory is
// the implementation used until the write-ahead log (package wal) backs
// it, and the one tests use.
//
// # What is stored
//
//	retained:  topic name ─▶ Message (the newest retained PUBLISH;
//	           an empty payload deletes it [MQTT-3.3.1-6])
//	sessions:  client id  ─▶ Session (expiry interval, subscriptions)
//
// Values handed to a Store are owned by the store afterwards: callers pass
// copies and never modify them again. Values handed out by a Store are
// shared and must be treated as read-only.
package store
