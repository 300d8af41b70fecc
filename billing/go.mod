module berth.dev/billing

go 1.26.0

require (
	berth.dev/flagenv v0.0.0
	berth.dev/migrations v0.0.0
	berth.dev/quotas v0.0.0
	berth.dev/testenv v0.0.0
	github.com/go-pdf/fpdf v0.9.0
	github.com/google/go-cmp v0.7.0
	github.com/jackc/pgx/v5 v5.12.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mfridman/interpolate v0.0.2 // indirect
	github.com/pressly/goose/v3 v3.30.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/sethvargo/go-retry v0.5.0 // indirect
	github.com/stripe/stripe-go/v82 v82.5.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace (
	berth.dev/flagenv => ../flagenv
	berth.dev/migrations => ../migrations
	berth.dev/quotas => ../quotas
	berth.dev/testenv => ../testenv
)
