//! TLS for the server (DESIGN 3; issue "Server platform"): rustls with the ring
//! provider, from PEM files the operator configures, or from a local CA that the
//! server creates in its data directory on first start (`server.tls: auto`).
//!
//! The local CA: `<data_dir>/tls/ca.pem` (the certificate the host service and the
//! CLI trust through `SSL_CERT_FILE`) and `<data_dir>/tls/ca.key` (mode 0600).
//! At every start the server issues itself a fresh server certificate from that CA
//! for the host of `server.public_url` plus `localhost`, 127.0.0.1 and ::1, so a
//! changed public URL needs no manual step; the CA itself never changes unless its
//! files are removed. There is no way to skip verification on the client side:
//! clients trust this CA or the operator's own certificate.

use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Where the certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// Plain HTTP, for running behind an edge that terminates TLS.
    Off,
    /// The local CA in `dir`, and a server certificate for `hostnames`.
    Auto {
        /// `<data_dir>/tls`.
        dir: PathBuf,
        /// The host of `server.public_url` (a name or an IP address).
        public_host: String,
    },
    /// The operator's PEM files.
    Files {
        /// Certificate chain, leaf first.
        cert_file: PathBuf,
        /// The private key (PKCS#8, PKCS#1 or SEC1).
        key_file: PathBuf,
    },
}

/// Why TLS could not be set up. Paths are the operator's own configuration;
/// no key material ever appears here.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("cannot use {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A PEM file holds no usable certificate or key.
    #[error("{path} holds no usable {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// "certificate" or "private key".
        what: &'static str,
    },
    /// Creating the local CA or the server certificate failed.
    #[error("cannot create a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the certificate and key.
    #[error("the certificate and key do not form a TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// What [`server_config`] set up.
#[derive(Debug)]
pub struct ServerTls {
    /// The rustls configuration, `None` for [`TlsSource::Off`].
    pub config: Option<Arc<ServerConfig>>,
    /// The CA file clients must trust, for [`TlsSource::Auto`].
    pub ca_file: Option<PathBuf>,
}

/// Builds the TLS configuration of the server (ALPN h2 and http/1.1).
pub fn server_config(source: &TlsSource) -> Result<ServerTls, TlsError> {
    let (chain, key, ca_file) = match source {
        TlsSource::Off => {
            return Ok(ServerTls {
                config: None,
                ca_file: None,
            });
        }
        TlsSource::Files {
            cert_file,
            key_file,
        } => {
            let chain = read_chain(cert_file)?;
            let key = PrivateKeyDer::from_pem_file(key_file).map_err(|_| TlsError::Pem {
                path: key_file.clone(),
                what: "private key",
            })?;
            (chain, key, None)
        }
        TlsSource::Auto { dir, public_host } => {
            let (chain, key) = local_ca_server_cert(dir, public_host)?;
            (chain, key, Some(dir.join(CA_CERT)))
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServerTls {
        config: Some(Arc::new(config)),
        ca_file,
    })
}

const CA_CERT: &str = "ca.pem";
const CA_KEY: &str = "ca.key";
const CA_COMMON_NAME: &str = "bothy-server local CA";

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = || TlsError::Pem {
        path: path.to_path_buf(),
        what: "certificate",
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|_| pem_error())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| pem_error())?;
    if chain.is_empty() {
        return Err(pem_error());
    }
    Ok(chain)
}

/// The CA's parameters; fixed, so the issuer can be rebuilt from the stored key
/// at every start without parsing the stored certificate.
fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    Ok(params)
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Loads the local CA from `dir`, creating it on first start, and issues a
/// server certificate for `public_host` and the loopback names.
fn local_ca_server_cert(
    dir: &Path,
    public_host: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_error(dir))?;
    let cert_path = dir.join(CA_CERT);
    let key_path = dir.join(CA_KEY);
    let ca_key = if key_path.exists() && cert_path.exists() {
        let pem = fs::read_to_string(&key_path).map_err(io_error(&key_path))?;
        KeyPair::from_pem(&pem).map_err(|_| TlsError::Pem {
            path: key_path.clone(),
            what: "private key",
        })?
    } else {
        let key = KeyPair::generate()?;
        let cert = ca_params()?.self_signed(&key)?;
        write_private(&key_path, key.serialize_pem().as_bytes())?;
        fs::write(&cert_path, cert.pem()).map_err(io_error(&cert_path))?;
        tracing::info!(ca_file = %cert_path.display(), "created a local CA for TLS");
        key
    };
    let ca_der = CertificateDer::from_pem_file(&cert_path).map_err(|_| TlsError::Pem {
        path: cert_path.clone(),
        what: "certificate",
    })?;
    let issuer = Issuer::new(ca_params()?, ca_key);

    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, public_host);
    params.distinguished_name = name;
    let mut sans = vec![
        SanType::DnsName("localhost".try_into()?),
        SanType::IpAddress(IpAddr::from(Ipv4Addr::LOCALHOST)),
        SanType::IpAddress(IpAddr::from(Ipv6Addr::LOCALHOST)),
    ];
    match public_host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => sans.push(SanType::IpAddress(ip)),
        Err(_) if public_host != "localhost" => {
            sans.push(SanType::DnsName(public_host.to_string().try_into()?));
        }
        Err(_) => {}
    }
    sans.dedup();
    params.subject_alt_names = sans;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    let server_key = KeyPair::generate()?;
    let server_cert = params.signed_by(&server_key, &issuer)?;
    let key = PrivateKeyDer::try_from(server_key.serialize_der()).map_err(|_| TlsError::Pem {
        path: key_path,
        what: "private key",
    })?;
    Ok((vec![server_cert.der().clone(), ca_der], key))
}

/// Writes a file readable only by its owner (created with mode 0600).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(path))?;
    file.write_all(bytes).map_err(io_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_has_no_config() {
        let tls = server_config(&TlsSource::Off).unwrap();
        assert!(tls.config.is_none() && tls.ca_file.is_none());
    }

    #[test]
    fn auto_creates_the_ca_once_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let tls_dir = dir.path().join("tls");
        let source = TlsSource::Auto {
            dir: tls_dir.clone(),
            public_host: "bothy.test".into(),
        };
        let first = server_config(&source).unwrap();
        assert!(first.config.is_some());
        assert_eq!(
            first.ca_file.as_deref(),
            Some(tls_dir.join("ca.pem").as_path())
        );
        let ca = fs::read(tls_dir.join("ca.pem")).unwrap();
        let key_mode = fs::metadata(tls_dir.join("ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(key_mode & 0o777, 0o600);
        let dir_mode = fs::metadata(&tls_dir).unwrap().permissions().mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        server_config(&source).unwrap();
        assert_eq!(
            fs::read(tls_dir.join("ca.pem")).unwrap(),
            ca,
            "the CA stays"
        );
    }

    #[test]
    fn files_that_hold_no_pem_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        fs::write(&cert, "not a certificate").unwrap();
        fs::write(&key, "not a key").unwrap();
        let error = server_config(&TlsSource::Files {
            cert_file: cert.clone(),
            key_file: key,
        })
        .unwrap_err();
        assert!(error.to_string().contains("cert.pem"), "{error}");
    }
}
