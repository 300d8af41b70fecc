// Package topic is the subscription index of one tenant shard: the topic
// tree that maps a PUBLISH topic name to the sessions that must receive it,
// and the retained-message index that maps a SUBSCRIBE filter to the
// retained topics it must replay.
//
// # Names and filters
//
// A topic name is split on '/' into levels; empty levels are valid
// ("a//b", "/a", "a/") [MQTT-4.7.1-1]. A filter may use the single-level
// wildcard '+' and the multi-level wildcard '#':
//
//	filter            matches                        does not match
//	sport/#           sport, sport/, sport/a/b        sports
//	sport/+           sport/a, sport/                 sport, sport/a/b
//	+/+               /finance, a/b                   finance
//	+                 a, "" (one empty level)         /a
//	#                 everything not starting with $  $SYS/x
//	$SYS/#            $SYS, $SYS/broker/load          -
//
// A shared subscription is written $share/{ShareName}/{filter}; the
// {filter} part is matched like any other filter and each message goes to
// exactly one member of the group (v5 §4.8.2):
//
//	$share / group1 / sport/+/player
//	 ^^^^^   ^^^^^^   ^^^^^^^^^^^^^^
//	 prefix  share    the filter that is matched
//	         name     (may itself use + and #)
//
// # Subscriber identity
//
// The tree never sees sessions or connections. The server names each
// client with a SubscriberID of its choosing (for example an index into its
// session table) and maps results back itself.
//
// # Concurrency
//
// Tree and Retained each guard their state with a sync.RWMutex: matching
// (the per-PUBLISH hot path) takes the read lock, so any number of
// publishes match in parallel; SUBSCRIBE, UNSUBSCRIBE and disconnects take
// the write lock briefly. The only state a match writes is the round-robin
// cursor of share groups, an atomic counter. Copy-on-write was rejected
// because a 100k-subscription tree would be copied (or path-copied with
// per-subscribe allocation) on every subscribe storm at reconnect time,
// while matches hold the read lock for microseconds.
package topic
