//! The stream against rustls's own client (tokio-rustls) over an in-memory
//! pipe: the handshake, data both ways at once, writes of several buffers,
//! close_notify either way, refusals, and what an idle connection keeps.

use std::future::poll_fn;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream as ClientStream;

use super::*;
use crate::tls::{TlsSource, server_config};

/// The server's configuration (the local CA's certificate for localhost)
/// and a client configuration that trusts it and keeps its sessions.
fn configs() -> (
    Arc<ServerConfig>,
    Arc<rustls::ClientConfig>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let tls = server_config(&TlsSource::Auto {
        dir: dir.path().join("tls"),
        public_host: "localhost".to_owned(),
    })
    .expect("TLS configuration");
    let mut roots = rustls::RootCertStore::empty();
    let ca_file = tls.ca_file.expect("CA file");
    for cert in CertificateDer::pem_file_iter(&ca_file).expect("CA") {
        roots.add(cert.expect("certificate")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    (
        tls.config.expect("server configuration"),
        Arc::new(client),
        dir,
    )
}

/// A connected pair: the server's stream and the client's.
async fn pair(
    server: &Arc<ServerConfig>,
    client: &Arc<rustls::ClientConfig>,
) -> (TlsStream<DuplexStream>, ClientStream<DuplexStream>) {
    let (near, far) = duplex(256 * 1024);
    let name = ServerName::try_from("localhost").expect("name");
    let (accepted, connected) = tokio::join!(
        accept(Arc::clone(server), near),
        TlsConnector::from(Arc::clone(client)).connect(name, far)
    );
    (accepted.expect("accepted"), connected.expect("connected"))
}

/// The session tickets come after the handshake: the client takes them as
/// it reads, here one byte the server writes.
async fn take_tickets(
    server: &mut TlsStream<DuplexStream>,
    client: &mut ClientStream<DuplexStream>,
) {
    server.write_all(b"x").await.expect("write");
    server.flush().await.expect("flush");
    client.read_exact(&mut [0u8; 1]).await.expect("read");
}

/// Whether a read of the server's stream would wait now.
async fn waits(stream: &mut TlsStream<DuplexStream>) -> bool {
    let mut byte = [0u8; 1];
    poll_fn(|cx| {
        let mut buf = ReadBuf::new(&mut byte);
        Poll::Ready(Pin::new(&mut *stream).poll_read(cx, &mut buf).is_pending())
    })
    .await
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test]
async fn data_goes_both_ways_at_once_and_an_idle_connection_keeps_no_buffer() {
    let (server_config, client_config, _dir) = configs();
    let (mut server, mut client) = pair(&server_config, &client_config).await;
    assert_eq!(server.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(server.handshake_kind(), Some(rustls::HandshakeKind::Full));

    // A megabyte each way, written and read at the same time: records for
    // the reader arrive while the writer needs the connection.
    let up = pattern(1 << 20, 7);
    let down = pattern(1 << 20, 91);
    let (mut server_read, mut server_write) = tokio::io::split(server);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (got_up, got_down, (), ()) = tokio::join!(
        async {
            let mut got = vec![0u8; up.len()];
            server_read
                .read_exact(&mut got)
                .await
                .expect("server reads");
            got
        },
        async {
            let mut got = vec![0u8; down.len()];
            client_read
                .read_exact(&mut got)
                .await
                .expect("client reads");
            got
        },
        async {
            client_write.write_all(&up).await.expect("client writes");
            client_write.flush().await.expect("client flushes");
        },
        async {
            server_write.write_all(&down).await.expect("server writes");
            server_write.flush().await.expect("server flushes");
        },
    );
    assert!(got_up == up, "the server read what the client wrote");
    assert!(got_down == down, "the client read what the server wrote");
    server = server_read.unsplit(server_write);
    client = client_read.unsplit(client_write);

    // Idle: a read waits, and the stream holds no buffer of its own.
    assert!(waits(&mut server).await);
    assert_eq!(
        (
            server.incoming.capacity(),
            server.outgoing.capacity(),
            server.plaintext.capacity()
        ),
        (0, 0, 0)
    );

    // Several buffers in one write (a frame's header and its payload).
    frame_in_one_write(&mut server, &mut client, [0x82, 0x7e, 0x01, 0x00], 256).await;
}

/// Writes a frame's `header` and a payload of `len` bytes as one vectored
/// write of the server, which must take them whole, and reads them at the
/// client as written.
async fn frame_in_one_write(
    server: &mut TlsStream<DuplexStream>,
    client: &mut ClientStream<DuplexStream>,
    header: [u8; 4],
    len: usize,
) {
    let payload = pattern(len, 3);
    let slices = [IoSlice::new(&header), IoSlice::new(&payload)];
    let written = server
        .write_vectored(&slices)
        .await
        .expect("vectored write");
    assert_eq!(written, header.len() + payload.len());
    server.flush().await.expect("flush");
    let mut got = vec![0u8; written];
    client.read_exact(&mut got).await.expect("client reads");
    assert_eq!(&got[..4], &header);
    assert!(got[4..] == payload[..], "the payload arrived as written");
}

/// A frame of the largest relay message (65,535 bytes and its 4-byte header)
/// is taken by one write (D-725).
#[tokio::test]
async fn the_largest_relay_frame_goes_out_in_one_write() {
    let (server_config, client_config, _dir) = configs();
    let (mut server, mut client) = pair(&server_config, &client_config).await;
    frame_in_one_write(&mut server, &mut client, [0x82, 0x7e, 0xff, 0xff], 0xffff).await;
}

/// Writes all of `slices` through the server's vectored writes (each takes
/// at most [`MAX_WRITE`]), flushing once.
async fn write_all_vectored(server: &mut TlsStream<DuplexStream>, slices: &[&[u8]]) {
    let mut slices: Vec<IoSlice<'_>> = slices.iter().map(|s| IoSlice::new(s)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = server.write_vectored(rest).await.expect("vectored write");
        assert!(n > 0 && n <= MAX_WRITE, "a write takes at most MAX_WRITE");
        IoSlice::advance_slices(&mut rest, n);
    }
    server.flush().await.expect("flush");
}

/// The data lengths of the records the client's socket holds, read raw
/// (the client's TLS does not see them), until `total` bytes of data.
async fn record_lengths(client: &mut ClientStream<DuplexStream>, total: usize) -> Vec<usize> {
    let raw = &mut client.get_mut().0;
    let mut lengths = Vec::new();
    while lengths.iter().sum::<usize>() < total {
        let mut head = [0u8; 5];
        raw.read_exact(&mut head).await.expect("record header");
        assert_eq!(head[0], 23, "an application data record");
        let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
        raw.read_exact(&mut vec![0u8; len]).await.expect("record");
        // TLS 1.3: the inner content type and a 16-byte tag.
        lengths.push(len - 17);
    }
    lengths
}

/// Frames of the largest relay message beside small ones, written
/// vectored, make the records all their bytes written at once would make:
/// full records, then the rest (D-728: only what shares a record with
/// another buffer is gathered; a large payload's whole records are
/// encrypted from it).
#[tokio::test]
async fn vectored_writes_make_the_records_of_the_bytes_joined() {
    let (server_config, client_config, _dir) = configs();
    let (mut server, mut client) = pair(&server_config, &client_config).await;
    // Only the records below are raw on the client's socket then.
    take_tickets(&mut server, &mut client).await;

    let large = pattern(0xffff, 5);
    let small = pattern(100, 9);
    let header: &[u8] = &[0x82, 0x7e, 0xff, 0xff];
    let slices = [
        header,
        &large[..],
        &[0x82, 0x64][..],
        &small[..],
        header,
        &large[..],
    ];
    let total: usize = slices.iter().map(|s| s.len()).sum();
    write_all_vectored(&mut server, &slices).await;
    // Three writes of at most MAX_WRITE, each cut into records of 16 KiB.
    let mut expected = Vec::new();
    let mut left = total;
    while left > 0 {
        let write = left.min(MAX_WRITE);
        expected.extend(std::iter::repeat_n(RECORD_DATA, write / RECORD_DATA));
        if write % RECORD_DATA > 0 {
            expected.push(write % RECORD_DATA);
        }
        left -= write;
    }
    assert_eq!(record_lengths(&mut client, total).await, expected);

    // One buffer alone: its records straight from it, the last one short.
    server.write_all(&large).await.expect("write");
    server.flush().await.expect("flush");
    assert_eq!(
        record_lengths(&mut client, large.len()).await,
        [RECORD_DATA, RECORD_DATA, RECORD_DATA, RECORD_DATA - 1]
    );
}

/// The same frames arrive as written, byte for byte.
#[tokio::test]
async fn vectored_writes_deliver_every_byte_in_order() {
    let (server_config, client_config, _dir) = configs();
    let (mut server, mut client) = pair(&server_config, &client_config).await;
    let large = pattern(0xffff, 5);
    let odd = pattern(3 * RECORD_DATA + 7, 11);
    let small = pattern(100, 9);
    let slices: [&[u8]; 7] = [&[1, 2, 3], &large, &small, &odd, &[4], &small, &large];
    let joined: Vec<u8> = slices.concat();
    let (got, ()) = tokio::join!(
        async {
            let mut got = vec![0u8; joined.len()];
            client.read_exact(&mut got).await.expect("client reads");
            got
        },
        write_all_vectored(&mut server, &slices)
    );
    assert!(got == joined, "the client read the slices in order");
}

/// A read into a small buffer (a frame's header) decrypts no more records
/// than it needs: the records after it wait encrypted, not as a copy of
/// their data (D-728), and a later read gets them in order.
#[tokio::test]
async fn a_small_read_leaves_later_records_encrypted() {
    let (server_config, client_config, _dir) = configs();
    let (mut server, mut client) = pair(&server_config, &client_config).await;
    let sent = pattern(0xffff, 21);
    client.write_all(&sent).await.expect("write");
    client.flush().await.expect("flush");
    let mut head = [0u8; 2];
    server.read_exact(&mut head).await.expect("read");
    assert_eq!(head, [sent[0], sent[1]]);
    assert!(
        server.plaintext.len() - server.taken < RECORD_DATA,
        "at most one record's data waits decrypted"
    );
    assert!(
        server.incoming.len() > 2 * RECORD_DATA,
        "the later records wait encrypted (one read brought them all)"
    );
    let mut rest = vec![0u8; sent.len() - 2];
    server.read_exact(&mut rest).await.expect("read");
    assert!(rest == sent[2..], "the rest in order");
    assert!(waits(&mut server).await);
    assert_eq!(
        (server.incoming.capacity(), server.plaintext.capacity()),
        (0, 0)
    );
}

#[tokio::test]
async fn close_notify_ends_reads_cleanly_either_way() {
    let (server_config, client_config, _dir) = configs();
    let (mut server, mut client) = pair(&server_config, &client_config).await;
    server.write_all(b"last words").await.expect("write");
    server.shutdown().await.expect("server shuts down");
    let mut got = Vec::new();
    // rustls's client reports a missing close_notify as an error: an Ok end
    // means it came after the data.
    client.read_to_end(&mut got).await.expect("a clean end");
    assert_eq!(got, b"last words");

    let (mut server, mut client) = pair(&server_config, &client_config).await;
    client.write_all(b"bye").await.expect("write");
    client.shutdown().await.expect("client shuts down");
    let mut got = Vec::new();
    server
        .read_to_end(&mut got)
        .await
        .expect("the server reads to the end");
    assert_eq!(got, b"bye");
    // Reads stay at their end.
    assert_eq!(server.read(&mut [0u8; 8]).await.expect("read"), 0);
}

#[tokio::test]
async fn a_client_that_kept_its_session_resumes_it() {
    let (server_config, client_config, _dir) = configs();
    let (mut server, mut client) = pair(&server_config, &client_config).await;
    take_tickets(&mut server, &mut client).await;
    drop((server, client));
    let (server, _client) = pair(&server_config, &client_config).await;
    assert_eq!(
        server.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
}

#[tokio::test]
async fn what_is_not_tls_is_refused_and_an_early_end_is_unexpected() {
    let (server_config, _client, _dir) = configs();
    let (near, mut far) = duplex(64 * 1024);
    far.write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .expect("write");
    let error = accept(Arc::clone(&server_config), near)
        .await
        .err()
        .expect("refused");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);

    let (near, far) = duplex(64 * 1024);
    drop(far);
    let error = accept(server_config, near).await.err().expect("refused");
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn a_record_changed_on_the_way_is_refused() {
    let (server_config, client_config, _dir) = configs();
    // The client's records pass through a relay that flips one bit of the
    // first application data record.
    let (near, mut relay_near) = duplex(64 * 1024);
    let (mut relay_far, far) = duplex(64 * 1024);
    let name = ServerName::try_from("localhost").expect("name");
    // The changed record may arrive with the client's Finished, inside the
    // handshake's last read: refused there or by the first read.
    let server_task = tokio::spawn(async move {
        let mut server = accept(server_config, near).await?;
        let mut buf = [0u8; 64];
        server.read(&mut buf).await
    });
    let relay = tokio::spawn(async move {
        let (mut a_read, mut a_write) = tokio::io::split(&mut relay_near);
        let (mut b_read, mut b_write) = tokio::io::split(&mut relay_far);
        let down = tokio::io::copy(&mut a_read, &mut b_write);
        let up = async {
            // Records from the client, whole: flip a bit in the payload of
            // the first application data record after the handshake's.
            let mut seen_app = 0;
            loop {
                let mut head = [0u8; 5];
                if b_read.read_exact(&mut head).await.is_err() {
                    return;
                }
                let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
                let mut body = vec![0u8; len];
                if b_read.read_exact(&mut body).await.is_err() {
                    return;
                }
                if head[0] == 23 {
                    seen_app += 1;
                    // The client's Finished travels in the first one (TLS 1.3).
                    if seen_app == 2 {
                        body[0] ^= 1;
                    }
                }
                if a_write.write_all(&head).await.is_err()
                    || a_write.write_all(&body).await.is_err()
                {
                    return;
                }
            }
        };
        let _ = tokio::join!(down, up);
    });
    let mut client = TlsConnector::from(client_config)
        .connect(name, far)
        .await
        .expect("connected");
    client.write_all(b"hello").await.expect("write");
    client.flush().await.expect("flush");
    let read = server_task.await.expect("server task");
    assert_eq!(
        read.expect_err("refused").kind(),
        io::ErrorKind::InvalidData
    );
    relay.abort();
}

#[tokio::test]
async fn a_key_update_of_the_client_keeps_data_flowing_both_ways() {
    let (server_config, client_config, _dir) = configs();
    let (mut server, mut client) = pair(&server_config, &client_config).await;
    // rustls asks the peer to update its keys as well: the server's answer
    // is made while it reads and goes out with its next write, before it.
    client
        .get_mut()
        .1
        .refresh_traffic_keys()
        .expect("key update");
    client.write_all(b"after the update").await.expect("write");
    client.flush().await.expect("flush");
    let mut got = [0u8; 16];
    server.read_exact(&mut got).await.expect("server reads");
    assert_eq!(&got, b"after the update");
    server.write_all(b"answer").await.expect("write");
    server.flush().await.expect("flush");
    let mut got = [0u8; 6];
    client.read_exact(&mut got).await.expect("client reads");
    assert_eq!(&got, b"answer");
}
