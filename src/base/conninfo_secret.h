/*-------------------------------------------------------------------------
 *
 * conninfo_secret.h
 *	  Keeping the password of changestream.conninfo out of messages
 *	  (conninfo_secret.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_CONNINFO_SECRET_H
#define CS_CONNINFO_SECRET_H

extern char *cs_redact_password(const char *text, const char *conninfo);

#endif							/* CS_CONNINFO_SECRET_H */
