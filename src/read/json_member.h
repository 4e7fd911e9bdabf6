/*-------------------------------------------------------------------------
 *
 * json_member.h
 *	  Typed access to members of jsonb containers read from the archive
 *	  (snapshot manifests, table definitions), each returning NULL or
 *	  false for a member that is absent or of another type, so that the
 *	  caller reports damage in its own words (json_member.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_JSON_MEMBER_H
#define CS_JSON_MEMBER_H

#include "utils/jsonb.h"

extern JsonbValue *cs_json_member(JsonbContainer *obj, const char *key);
extern JsonbContainer *cs_json_container(JsonbContainer *obj, const char *key,
										 bool array);
extern JsonbValue *cs_json_element(JsonbContainer *arr, int i);
extern JsonbContainer *cs_json_object_value(JsonbValue *v);
extern char *cs_json_string(JsonbValue *v, int maxlen);
extern bool cs_json_int64(JsonbValue *v, int64 *out);

#endif							/* CS_JSON_MEMBER_H */
