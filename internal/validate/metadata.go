package validate

import (
	"strings"
	"unicode/utf8"
)

const (
	maxMetadataPairs = 32
	maxMetadataBytes = 4 << 10
)

// CheckMetadata bounds a sandbox's labels, and a filter of them (a filter
// no label could match is the caller's mistake, not an empty answer):
// 32 pairs, keys 1-128 bytes, 4 KiB in all, UTF-8 without NUL. An
// *InputError names "metadata".
func CheckMetadata(md map[string]string) error {
	if len(md) > maxMetadataPairs {
		return Refuse("metadata", "has %d pairs; the limit is %d", len(md), maxMetadataPairs)
	}
	total := 0
	for k, v := range md {
		if k == "" || len(k) > 128 || !utf8.ValidString(k) || !utf8.ValidString(v) ||
			strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return Refuse("metadata", "keys are 1-128 bytes, keys and values UTF-8 without NUL")
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return Refuse("metadata", "holds %d bytes; the limit is %d", total, maxMetadataBytes)
	}
	return nil
}
