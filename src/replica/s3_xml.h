/*-------------------------------------------------------------------------
 *
 * s3_xml.h
 *	  The few elements of S3's XML responses the client reads (s3_xml.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_S3_XML_H
#define CS_S3_XML_H

/* an element's content in a document: [start, start + len) */
typedef struct CsXmlSpan
{
	const char *start;
	size_t		len;
} CsXmlSpan;

extern bool cs_xml_find(const char *doc, size_t doclen, const char *name,
						CsXmlSpan *out);
extern char *cs_xml_text(CsXmlSpan span, size_t max);
extern char *cs_xml_display_text(CsXmlSpan span, size_t max);

#endif							/* CS_S3_XML_H */
