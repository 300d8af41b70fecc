package chartcheck

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// dnsArgs turns the gateways' DNS responder on with its two required
// values (name servers outside the zone), and moves mqttHost (default:
// domain, the zone's apex) out of the zone.
var dnsArgs = []string{"--set", "gateway.dns.enabled=true", "--set", "mqttHost=lb.example.net",
	"--set", "gateway.dns.nameServers={ns1.dns.example.net,ns2.dns.example.net}", "--set", "gateway.dns.fallback=lb.example.net"}

// TestGatewayDNS: gateway.dns gives the gateway container -dns-listen on
// 5353 (UDP and TCP ports) with the zone (domain), TTL, name servers,
// fallback and, when set, the ACME challenge's CNAME; Service <release>-dns maps UDP and TCP 53 to them
// on the gateways' pods (the node pods when co-located), and the gateway
// NetworkPolicy lets anyone reach them. Off by default: none of it.
// Refused: no name servers or no fallback, a TTL that is no duration, a
// name server that is no host name, a zone other than domain (the API
// hands out <slug>.<domain>), and a name server, fallback, ACME target,
// public domain or mqttHost inside the zone (the responder answers only
// <slug>.<zone>).
func TestGatewayDNS(t *testing.T) {
	h := newHelm(t)
	objs := render(t, h, "-f", prodValues)
	gw := find[*appsv1.Deployment](t, objs, "Deployment", "berth-gateway").Spec.Template.Spec.Containers[0]
	for _, a := range gw.Args {
		if strings.HasPrefix(a, "-dns-") {
			t.Errorf("default: gateway flag %s", a)
		}
	}
	for _, o := range objs {
		if o.Kind == "Service" && o.Name == "berth-dns" {
			t.Error("default: Service berth-dns rendered")
		}
	}

	for _, tc := range []struct {
		name      string
		args      []string
		colocated bool
		zone      string
	}{
		{"gateway pods", []string{"-f", prodValues}, false, "mqtt.example.com"},
		{"co-located", []string{"-f", prodValues, "-f", colocatedValues, "--set", "gateway.dns.zone=MQTT.example.com.",
			"--set", "gateway.dns.ttl=30s", "--set", "gateway.dns.acmeChallengeCNAME=mqtt.acme.example.net"}, true, "mqtt.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, h, append(tc.args, dnsArgs...)...)
			sts, _ := nodeContainer(t, objs)
			var gw corev1.Container
			pods := labels.Set(sts.Spec.Template.Labels)
			if tc.colocated {
				gw, _ = podGateway(sts)
			} else {
				dep := find[*appsv1.Deployment](t, objs, "Deployment", "berth-gateway")
				gw, pods = dep.Spec.Template.Spec.Containers[0], labels.Set(dep.Spec.Template.Labels)
			}
			ttl := "5s"
			if tc.colocated {
				ttl = "30s"
			}
			acme := ""
			if tc.colocated {
				acme = "mqtt.acme.example.net"
			}
			for flag, want := range map[string]string{"dns-listen": ":5353", "dns-zone": tc.zone, "dns-ttl": ttl,
				"dns-ns": "ns1.dns.example.net,ns2.dns.example.net", "dns-fallback": "lb.example.net", "dns-acme-cname": acme} {
				if got, _ := flagValue(gw.Args, flag); got != want {
					t.Errorf("gateway -%s=%q, want %q", flag, got, want)
				}
			}
			ports := map[string]corev1.ContainerPort{}
			for _, p := range gw.Ports {
				ports[p.Name] = p
			}
			svc := find[*corev1.Service](t, objs, "Service", "berth-dns")
			var served []corev1.Protocol
			for _, p := range svc.Spec.Ports {
				cp, ok := ports[p.TargetPort.String()]
				if p.Port != 53 || !ok || cp.ContainerPort != 5353 || cp.Protocol != p.Protocol {
					t.Errorf("berth-dns port %+v: want 53 to a 5353 port of the gateway of its protocol (%+v)", p, cp)
				}
				served = append(served, p.Protocol)
			}
			slices.Sort(served)
			if !slices.Equal(served, []corev1.Protocol{"TCP", "UDP"}) || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
				t.Errorf("berth-dns: %s serving %v, want a LoadBalancer on UDP and TCP", svc.Spec.Type, served)
			}
			for _, w := range workloads(objs) {
				if got := mustSelector(t, svc.Spec.Selector).Matches(labels.Set(w.pod.Labels)); got != labels.Equals(labels.Set(w.pod.Labels), pods) {
					t.Errorf("berth-dns selects %s %s: %v", w.kind, w.name, got)
				}
			}
			// The API hands each tenant its own name, which the responder answers.
			api := find[*appsv1.Deployment](t, objs, "Deployment", "berth-api").Spec.Template.Spec.Containers[0]
			for flag, want := range map[string]string{"mqtt-addr": "{slug}." + tc.zone + ":1883", "mqtt-tls-addr": "{slug}." + tc.zone + ":8883"} {
				if got, _ := flagValue(api.Args, flag); got != want {
					t.Errorf("api -%s=%q, want %q", flag, got, want)
				}
			}
			np := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "berth-gateway")
			var open []string
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					if len(rule.From) == 0 && p.Protocol != nil {
						open = append(open, p.Port.String()+"/"+string(*p.Protocol))
					}
				}
			}
			if !slices.Contains(open, "dns-udp/UDP") || !slices.Contains(open, "dns-tcp/TCP") ||
				!mustSelector(t, np.Spec.PodSelector.MatchLabels).Matches(pods) {
				t.Errorf("gateway policy opens %v to everyone: want dns-udp/UDP and dns-tcp/TCP on the gateways' pods", open)
			}
		})
	}

	tag := []string{"--set", "image.tag=0.1.0"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no name servers", append(slices.Clone(tag), "--set", "gateway.dns.enabled=true", "--set", "gateway.dns.fallback=lb.example.net"), "gateway.dns.nameServers and gateway.dns.fallback are required"},
		{"no fallback", append(slices.Clone(tag), "--set", "gateway.dns.enabled=true", "--set", "gateway.dns.nameServers={ns1.example.com}"), "gateway.dns.nameServers and gateway.dns.fallback are required"},
		{"TTL not a duration", append(slices.Clone(tag), "--set", "gateway.dns.ttl=5"), "gateway/dns/ttl"},
		{"name server not a host name", append(slices.Clone(tag), "--set", "gateway.dns.nameServers={ns_1.example.com}"), "gateway/dns/nameServers/0"},
		{"fallback inside the zone", append(slices.Clone(tag), "--set", "gateway.dns.enabled=true", "--set", "gateway.dns.nameServers={ns1.example.com}", "--set", "gateway.dns.fallback=lb.mqtt.localhost"), "gateway.dns.fallback (lb.mqtt.localhost) must lie outside the zone"},
		{"public domain inside the zone", append(slices.Clone(tag), append(slices.Clone(dnsArgs), "--set", "gateway.colocated.enabled=true", "--set", "gateway.colocated.publicDomain=nodes.mqtt.localhost")...), "gateway.colocated.publicDomain (nodes.mqtt.localhost) must lie outside the zone"},
		{"mqttHost at the apex", append(slices.Clone(tag), "--set", "gateway.dns.enabled=true", "--set", "gateway.dns.nameServers={ns1.example.com}", "--set", "gateway.dns.fallback=10.0.0.1"), "mqttHost (default: domain) (mqtt.localhost) must lie outside the zone"},
		{"name server inside the zone", append(slices.Clone(tag), append(slices.Clone(dnsArgs), "--set", "gateway.dns.nameServers={ns1.dns.example.net,NS2.mqtt.localhost.}")...), "gateway.dns.nameServers[1] (NS2.mqtt.localhost.) must lie outside the zone"},
		{"ACME target inside the zone", append(slices.Clone(tag), append(slices.Clone(dnsArgs), "--set", "gateway.dns.acmeChallengeCNAME=acme.mqtt.localhost")...), "gateway.dns.acmeChallengeCNAME (acme.mqtt.localhost) must lie outside the zone"},
		{"ACME target not a host name", append(slices.Clone(tag), "--set", "gateway.dns.acmeChallengeCNAME=acme_x.example.net"), "gateway/dns/acmeChallengeCNAME"},
		{"zone other than domain", append(slices.Clone(tag), append(slices.Clone(dnsArgs), "--set", "gateway.dns.zone=devices.example.com")...), "gateway.dns.zone (devices.example.com) must be domain (mqtt.localhost) or empty"},
		{"unknown DNS value", append(slices.Clone(tag), "--set", "gateway.dns.port=53"), "additional properties 'port' not allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := renderErr(t, h, c.args...); !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}
