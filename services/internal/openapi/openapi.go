// Package openapi embeds the API's OpenAPI 3.1 document, served at
// /v1/openapi.json. A test in httpapi walks the router and fails when a
// route is missing from the document or a documented operation is not routed.
package openapi

import _ "embed"

//go:embed openapi.json
var document []byte

// Document returns the OpenAPI document (do not modify the slice).
func Document() []byte { return document }
