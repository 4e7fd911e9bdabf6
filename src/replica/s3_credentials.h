/*-------------------------------------------------------------------------
 *
 * s3_credentials.h
 *	  The replica's access keys (s3_credentials.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_S3_CREDENTIALS_H
#define CS_S3_CREDENTIALS_H

/* the longest key id, secret or session token accepted, in bytes */
#define CS_S3_KEY_MAX 128
#define CS_S3_TOKEN_MAX 4096

/* access keys, never logged or shown; wipe with cs_s3_credentials_wipe() */
typedef struct CsS3Credentials
{
	char		access_key[CS_S3_KEY_MAX + 1];
	char		secret_key[CS_S3_KEY_MAX + 1];
	char		session_token[CS_S3_TOKEN_MAX + 1]; /* "" = none */
} CsS3Credentials;

/* why credentials could not be had: messages without any secret */
typedef struct CsS3CredentialsProblem
{
	char	   *message;
	char	   *detail;			/* NULL or a sentence */
	char	   *hint;
} CsS3CredentialsProblem;

extern bool cs_s3_credentials_load(const char *source, const char *profile,
								   CsS3Credentials *out,
								   CsS3CredentialsProblem *problem);
extern void cs_s3_credentials_get(const char *source, const char *profile,
								  CsS3Credentials *out);
extern void cs_s3_credentials_wipe(CsS3Credentials *creds);

#endif							/* CS_S3_CREDENTIALS_H */
