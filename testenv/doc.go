// Package testenv gives tests real infrastructure with no shared state:
// each call to Postgres returns a fresh, fully migrated database of its own,
// and each call to Redis a key space of its own, both removed when the test
// ends. Tests in different packages (and parallel tests in one) therefore
// never see each other's rows or keys.
//
// The servers themselves are the private ones that `make test` starts
// (infra/dev/up.sh). Their addresses come from BERTH_TEST_DATABASE_URL and
// BERTH_TEST_REDIS_URL, defaulting to the dev stack's ports.
package testenv
