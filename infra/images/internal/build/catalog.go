package build

import "path"

// Image is one of Berth's images: one process, one static binary.
type Image struct {
	Name        string   // image name (repository), e.g. "berth-api"
	Package     string   // the binary's main package, relative to the repository root
	Description string   // its org.opencontainers.image.description
	Ports       []string // ports its default flags listen on, as "8080/tcp"
}

// Binary is the binary's name: the package's last element.
func (im Image) Binary() string { return path.Base(im.Package) }

// Entrypoint is where the binary lives in the image.
func (im Image) Entrypoint() string { return BinDir + "/" + im.Binary() }

// BinDir holds each image's binary.
const BinDir = "/usr/local/bin"

// Images is the catalog, in build order. The names are the contract with
// the Helm chart (infra/helm) and docs/deploy.md.
func Images() []Image {
	return []Image{
		{Name: "berth-api", Package: "./services/cmd/api",
			Description: "Berth control-plane REST API with the embedded dashboard",
			Ports:       []string{"8080/tcp"}},
		{Name: "berth-gateway", Package: "./gateway/cmd/gateway",
			Description: "Berth MQTT connection gateway",
			Ports:       []string{"1883/tcp", "8083/tcp", "8084/tcp", "8883/tcp"}},
		{Name: "berth-node", Package: "./broker/cmd/broker",
			Description: "Berth broker node (run with -node-id; standalone broker without it)",
			Ports:       []string{"7880/tcp", "7883/tcp"}},
		{Name: "berth-billing", Package: "./billing/cmd/billing",
			Description: "Berth billing worker"},
		{Name: "berth-migrate", Package: "./migrations/cmd/migrate",
			Description: "Berth Postgres schema migrations"},
	}
}
