//! Connection-URL helpers shared by the backends.

/// Takes the query parameter `name` out of a URL, for settings of ours that the driver would
/// refuse (`?schema=` for PostgreSQL, `?prefix=` for Redis): returns the URL without it and
/// its value (the last one when repeated).
///
/// ```
/// use mnemix_core::url::take_query_param;
/// assert_eq!(
///     take_query_param("redis://h:6379/?prefix=app&protocol=resp3", "prefix"),
///     ("redis://h:6379/?protocol=resp3".to_owned(), Some("app".to_owned()))
/// );
/// assert_eq!(take_query_param("postgres://h/db", "schema"), ("postgres://h/db".to_owned(), None));
/// ```
pub fn take_query_param(url: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((key, found)) if key == name => {
                value = Some(found.to_owned());
                false
            }
            _ => true,
        })
        .collect();
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, value)
}

/// The URL with any password replaced by `***`, for messages and `Debug` output.
///
/// ```
/// use mnemix_core::url::redacted;
/// assert_eq!(redacted("postgres://me:secret@db/app"), "postgres://me:***@db/app");
/// assert_eq!(redacted("redis://:secret@cache:6379"), "redis://:***@cache:6379");
/// assert_eq!(redacted("redis://cache:6379"), "redis://cache:6379");
/// ```
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            let credentials = &url[start + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..start + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::take_query_param;

    #[test]
    fn only_the_named_parameter_goes() {
        let (url, schema) =
            take_query_param("postgres://u@h/db?schema=mem&sslmode=disable", "schema");
        assert_eq!(url, "postgres://u@h/db?sslmode=disable");
        assert_eq!(schema.as_deref(), Some("mem"));
        assert_eq!(
            take_query_param("redis://h/?prefixes=x", "prefix"),
            ("redis://h/?prefixes=x".to_owned(), None)
        );
        assert_eq!(
            take_query_param("redis://h/?prefix=a", "prefix"),
            ("redis://h/".to_owned(), Some("a".to_owned()))
        );
    }
}
