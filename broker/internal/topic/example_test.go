package topic_test

import (
	"fmt"

	"berth.dev/broker/internal/topic"
)

// The server's PUBLISH path: one Matches per reader goroutine, reused.
func ExampleTree_Match() {
	tr := topic.New(topic.Config{})
	existed, _ := tr.Subscribe(1, "sport/#", topic.Options{QoS: 0, SubscriptionID: 10})
	fmt.Println("existed:", existed, "send retained:", topic.Options{}.SendRetainedOnSubscribe(existed, false))
	tr.Subscribe(1, "sport/+/player1", topic.Options{QoS: 2, SubscriptionID: 11})
	tr.Subscribe(2, "sport/tennis/player1", topic.Options{QoS: 1, NoLocal: true})
	tr.Subscribe(3, "$share/scorers/sport/tennis/+", topic.Options{QoS: 1})

	var m topic.Matches
	m.Ready = func(topic.SubscriberID) bool { return true } // e.g. "outbound queue not full"
	tr.Match([]byte("sport/tennis/player1"), 2, &m)         // published by client 2
	for _, d := range m.Deliveries {
		fmt.Printf("to %d qos %d ids %d share %q\n", d.Subscriber, d.QoS, len(d.SubscriptionIDs), d.ShareName)
	}
	// Output:
	// existed: false send retained: true
	// to 1 qos 2 ids 2 share ""
	// to 3 qos 1 ids 0 share "scorers"
}

func ExampleRetained_Match() {
	r := topic.NewRetained[string]()
	r.Set("sport/tennis", "15-0", 4)
	r.Set("$SYS/uptime", "42", 2)
	r.Match("#", func(t, v string) bool {
		fmt.Println(t, v) // $SYS/uptime is not matched by "#" [MQTT-4.7.2-1]
		return true
	})
	fmt.Println(r.Len(), r.Bytes())
	// Output:
	// sport/tennis 15-0
	// 2 6
}
