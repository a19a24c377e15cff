package validate

// Renamed takes a field's old spelling, accepted for the release after a
// rename, into the new one: the old value moves to the new field and the
// old is zeroed, so the rest of the server reads one name. Both given and
// different is an InputError naming the old field.
func Renamed[T comparable](name string, v *T, old string, ov *T) error {
	var zero T
	switch {
	case *ov == zero:
		return nil
	case *v != zero && *v != *ov:
		return Refuse(old, "is the old name of %s, which the request gives another value; give %s alone", name, name)
	}
	*v, *ov = *ov, zero
	return nil
}
