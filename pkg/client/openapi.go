package client

import (
	_ "embed" // the OpenAPI document
)

//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the Sandbox API's OpenAPI 3.1 document (openapi.json; a fresh copy
// each call), which the operator serves without a token at GET /openapi.json on the API port
// and from which clients in other languages can be generated (docs/sandbox-api.md).
func OpenAPIDocument() []byte {
	return append([]byte(nil), openAPIDocument...)
}
