// Package images holds Corral's image recipes, one NAME.toml per image
// (python, node, go, bash, full), embedded so that `corral image build`
// works from the binary alone. The format is internal/images.Recipe.
package images

import "embed"

// Recipes is the directory of recipe files.
//
//go:embed *.toml
var Recipes embed.FS
