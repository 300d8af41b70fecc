// Copy-ready client code for the Connect page, filled with one credential.

export interface Target {
  host: string;
  port: number;
  wsURL: string;
  username: string;
  password: string;
  topic: string;
}

const sq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const js = (s: string) => JSON.stringify(s);
const py = (s: string) => JSON.stringify(s);

export function snippets(t: Target): { label: string; code: string }[] {
  return [
    {
      label: 'mosquitto_sub',
      code: `mosquitto_sub -h ${t.host} -p ${t.port} -V mqttv5 \\\n  -u ${sq(t.username)} -P ${sq(t.password)} \\\n  -t ${sq(t.topic.replace(/[^/]*$/, '#'))} -v`,
    },
    {
      label: 'mosquitto_pub',
      code: `mosquitto_pub -h ${t.host} -p ${t.port} -V mqttv5 \\\n  -u ${sq(t.username)} -P ${sq(t.password)} \\\n  -t ${sq(t.topic)} -m 'hello from mosquitto'`,
    },
    {
      label: 'Go (paho.mqtt.golang)',
      code: `opts := mqtt.NewClientOptions().
\tAddBroker("tcp://${t.host}:${t.port}").
\tSetClientID("device-1").
\tSetUsername(${js(t.username)}).
\tSetPassword(${js(t.password)})
c := mqtt.NewClient(opts)
if tok := c.Connect(); tok.Wait() && tok.Error() != nil {
\tlog.Fatal(tok.Error())
}
c.Publish(${js(t.topic)}, 1, false, "hello from Go").Wait()`,
    },
    {
      label: 'JavaScript (MQTT.js)',
      code: `import mqtt from 'mqtt';

const client = mqtt.connect(${js(t.wsURL || `mqtt://${t.host}:${t.port}`)}, {
  protocolVersion: 5,
  username: ${js(t.username)},
  password: ${js(t.password)},
});
client.on('connect', () => client.publish(${js(t.topic)}, 'hello from MQTT.js', { qos: 1 }));`,
    },
    {
      label: 'Python (paho-mqtt 2)',
      code: `import paho.mqtt.client as mqtt

c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="device-1", protocol=mqtt.MQTTv5)
c.username_pw_set(${py(t.username)}, ${py(t.password)})
c.connect(${py(t.host)}, ${t.port})
c.loop_start()
c.publish(${py(t.topic)}, "hello from Python", qos=1).wait_for_publish()
c.loop_stop()`,
    },
  ];
}

/** host:port → its parts; a bare host gets the MQTT port. */
export function splitAddr(addr: string, defaultPort = 1883): { host: string; port: number } {
  const m = /^\[?([^\]]+?)\]?(?::(\d+))?$/.exec(addr.trim());
  if (!m) return { host: addr, port: defaultPort };
  return { host: m[1], port: m[2] ? Number(m[2]) : defaultPort };
}
