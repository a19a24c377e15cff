package validate

// Renamed takes a field's old spelling, accepted for the release after a
// rename, into the new one: the old value moves to the new field and the
// old is zeroed, so the rest of the server reads one name. It returns the
// name the request gave the field, which a later refusal of its value
// names: old when the request gave the old spelling alone, else name. Both
// given and different is an InputError naming the old field.
func Renamed[T comparable](name string, v *T, old string, ov *T) (string, error) {
	var zero T
	switch {
	case *ov == zero:
		return name, nil
	case *v == *ov:
		*ov = zero
		return name, nil
	case *v != zero:
		return old, Refuse(old, "is the old name of %s, which the request gives another value; give %s alone", name, name)
	}
	*v, *ov = *ov, zero
	return old, nil
}
