// Package billing is the root of Berth's billing module: plans and their
// quota bounds (package plan); usage rollups and invoices build on the usage
// tables the broker nodes fill.
package billing
