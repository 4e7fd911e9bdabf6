/*-------------------------------------------------------------------------
 *
 * json_member.c
 *	  Typed access to members of jsonb containers read from the archive.
 *	  The archive is untrusted: each accessor checks the JSON type (and a
 *	  string's length and that it holds no NUL) and returns NULL or false
 *	  otherwise; the caller turns that into XX001 naming its file and
 *	  offset.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>

#include "utils/builtins.h"
#include "utils/numeric.h"

#include "read/json_member.h"

/*
 * cs_json_member
 *	  The value of member key of object obj, or NULL when it has none.
 */
JsonbValue *
cs_json_member(JsonbContainer *obj, const char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = unconstify(char *, key);
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(obj, JB_FOBJECT, &k);
}

/*
 * cs_json_object_value
 *	  v's container when v is an object, else NULL.
 */
JsonbContainer *
cs_json_object_value(JsonbValue *v)
{
	if (v == NULL || v->type != jbvBinary ||
		!JsonContainerIsObject(v->val.binary.data))
		return NULL;
	return v->val.binary.data;
}

/*
 * cs_json_container
 *	  Member key of obj when it is an array (array true) or an object
 *	  (array false), else NULL.
 */
JsonbContainer *
cs_json_container(JsonbContainer *obj, const char *key, bool array)
{
	JsonbValue *v = cs_json_member(obj, key);

	if (v == NULL || v->type != jbvBinary ||
		(array ? !JsonContainerIsArray(v->val.binary.data) :
		 !JsonContainerIsObject(v->val.binary.data)))
		return NULL;
	return v->val.binary.data;
}

/*
 * cs_json_element
 *	  Element i (0-based) of array arr, or NULL past its end.
 */
JsonbValue *
cs_json_element(JsonbContainer *arr, int i)
{
	return getIthJsonbValueFromContainer(arr, i);
}

/*
 * cs_json_string
 *	  v as a palloc'd C string when it is a JSON string of at most maxlen
 *	  bytes without NUL, else NULL.
 */
char *
cs_json_string(JsonbValue *v, int maxlen)
{
	if (v == NULL || v->type != jbvString || v->val.string.len > maxlen ||
		memchr(v->val.string.val, '\0', v->val.string.len) != NULL)
		return NULL;
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * cs_json_int64
 *	  Whether v is a number that is an integer in int64's range, stored
 *	  into *out.
 */
bool
cs_json_int64(JsonbValue *v, int64 *out)
{
	char	   *text;
	char	   *end;

	if (v == NULL || v->type != jbvNumeric)
		return false;
	text = DatumGetCString(DirectFunctionCall1(numeric_out,
											   NumericGetDatum(v->val.numeric)));
	errno = 0;
	*out = strtoi64(text, &end, 10);
	return errno == 0 && end != text && *end == '\0';
}
