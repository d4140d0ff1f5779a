// Package confclip holds the texts of the project's licence and of the
// third-party works the binary links (llama.cpp and ggml),
// embedded so that `confclip version --licenses` carries them with every
// copy of the binary.
package confclip

import _ "embed"

// License is the project's licence (MIT).
//
//go:embed LICENSE
var License string

// ThirdPartyNotices are the licences of the works the binary links.
//
//go:embed THIRD_PARTY_NOTICES
var ThirdPartyNotices string
