package dev.lakesession.jvm;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configurable;
import org.apache.hadoop.conf.Configuration;
import software.amazon.awssdk.auth.credentials.AwsCredentialsProvider;
import software.amazon.awssdk.awscore.AwsRequest;
import software.amazon.awssdk.awscore.AwsRequestOverrideConfiguration;
import software.amazon.awssdk.awscore.exception.AwsErrorDetails;
import software.amazon.awssdk.core.SdkRequest;
import software.amazon.awssdk.core.interceptor.Context;
import software.amazon.awssdk.core.interceptor.ExecutionAttributes;
import software.amazon.awssdk.core.interceptor.ExecutionInterceptor;
import software.amazon.awssdk.http.SdkHttpResponse;
import software.amazon.awssdk.services.s3.model.AbortMultipartUploadRequest;
import software.amazon.awssdk.services.s3.model.CompleteMultipartUploadRequest;
import software.amazon.awssdk.services.s3.model.CopyObjectRequest;
import software.amazon.awssdk.services.s3.model.CreateMultipartUploadRequest;
import software.amazon.awssdk.services.s3.model.DeleteObjectRequest;
import software.amazon.awssdk.services.s3.model.DeleteObjectsRequest;
import software.amazon.awssdk.services.s3.model.ObjectIdentifier;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
import software.amazon.awssdk.services.s3.model.S3Exception;
import software.amazon.awssdk.services.s3.model.UploadPartCopyRequest;
import software.amazon.awssdk.services.s3.model.UploadPartRequest;

/**
 * S3A's request check ({@code fs.s3a.audit.execution.interceptors}; S3A's auditing, on by default
 * in Hadoop 3.4, instantiates it per filesystem and hands it the filesystem's Configuration): every
 * S3 request's bucket/key is checked against the bucket's union of this session's prefixes before
 * the store sees it. A key outside the union is the catalog's to decide, through the gateway's
 * {@code path-credentials}: a refusal fails the request with the catalog's words as an S3 403
 * (S3A raises AccessDeniedException, no request reaches the store); a grant means the union grew,
 * so the bucket's held key is dropped and the request goes on with the new union's. Every request
 * naming an object is signed (a per-request credentials provider) with the key of the prefix it lies
 * in: a large union comes as several keys (one session policy holds about a dozen prefixes), writes
 * from the bucket's write union, reads from its read union.
 */
public final class GrantCheckInterceptor implements ExecutionInterceptor, Configurable {
  private Configuration conf;

  public GrantCheckInterceptor() {}

  @Override
  public void setConf(Configuration conf) {
    this.conf = conf;
  }

  @Override
  public Configuration getConf() {
    return conf;
  }

  static boolean isWrite(SdkRequest r) {
    return r instanceof PutObjectRequest
        || r instanceof DeleteObjectRequest
        || r instanceof DeleteObjectsRequest
        || r instanceof CreateMultipartUploadRequest
        || r instanceof UploadPartRequest
        || r instanceof UploadPartCopyRequest
        || r instanceof CompleteMultipartUploadRequest
        || r instanceof AbortMultipartUploadRequest
        || r instanceof CopyObjectRequest;
  }

  @Override
  public SdkRequest modifyRequest(Context.ModifyRequest context, ExecutionAttributes attributes) {
    SdkRequest request = context.request();
    if (!GrantCheck.wired(conf)) {
      return request; // not a lakesession-wired filesystem
    }
    boolean write = isWrite(request);
    String bucket = field(request, write && request instanceof CopyObjectRequest ? "DestinationBucket" : "Bucket");
    if (bucket == null) {
      return request;
    }
    List<String> keys = new ArrayList<>();
    if (request instanceof CopyObjectRequest) {
      CopyObjectRequest copy = (CopyObjectRequest) request;
      keys.add(copy.destinationKey());
      String[] source = copySource(copy);
      check(source[0], List.of(source[1]), "read");
    } else if (request instanceof DeleteObjectsRequest) {
      for (ObjectIdentifier o : ((DeleteObjectsRequest) request).delete().objects()) {
        keys.add(o.key());
      }
    } else {
      String key = field(request, "Key");
      if (key == null) {
        key = field(request, "Prefix");
      }
      if (key != null) {
        keys.add(key);
      }
    }
    BucketCredentials union = check(bucket, keys, write ? "write" : "read");
    String signFor = keys.isEmpty() || keys.get(0) == null ? null : "s3://" + bucket + "/" + keys.get(0);
    if (!(request instanceof AwsRequest) || (!write && signFor == null)) {
      return request; // no object named: S3A's provider's key (the bucket's first) signs it
    }
    AwsRequest aws = (AwsRequest) request;
    AwsCredentialsProvider signer = () -> sdkCreds(union, signFor);
    AwsRequestOverrideConfiguration.Builder o =
        aws.overrideConfiguration().map(AwsRequestOverrideConfiguration::toBuilder).orElseGet(AwsRequestOverrideConfiguration::builder);
    return aws.toBuilder().overrideConfiguration(o.credentialsProvider(signer).build()).build();
  }

  /**
   * The key covering {@code path} in the union's current answer, resolved when the SDK signs the request
   * (a refreshed answer is picked up). The request-level {@code credentialsProvider} set in {@code
   * modifyRequest} is honoured by S3A's client (AWS SDK 2.54, hadoop-aws 3.4.2): tests/client/test_s3a_union_jvm.py
   * reads and writes prefixes of a union's first and last keys through it.
   */
  static software.amazon.awssdk.auth.credentials.AwsCredentials sdkCreds(BucketCredentials union, String path) {
    try {
      return S3ACredentialsProvider.toSdk(GrantCheck.keyFor(union, path));
    } catch (IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  /**
   * (bucket, key) a copy reads. The SDK's own interceptor runs first and folds {@code sourceBucket}/{@code
   * sourceKey} into the URL-encoded {@code copySource} header value ({@code bucket/key?versionId=…}), leaving
   * them null (S3A's renames: a NullPointerException here before).
   */
  static String[] copySource(CopyObjectRequest copy) {
    if (copy.sourceBucket() != null && copy.sourceKey() != null) {
      return new String[] {copy.sourceBucket(), copy.sourceKey()};
    }
    String header = field(copy, "CopySource"); // the field, by name: its getter is deprecated
    String raw = header == null ? "" : header;
    int q = raw.indexOf('?');
    String decoded =
        java.net.URLDecoder.decode(
            (q >= 0 ? raw.substring(0, q) : raw).replace("+", "%2B"), java.nio.charset.StandardCharsets.UTF_8);
    if (decoded.startsWith("/")) {
      decoded = decoded.substring(1);
    }
    int slash = decoded.indexOf('/');
    return slash < 0 ? new String[] {decoded, ""} : new String[] {decoded.substring(0, slash), decoded.substring(slash + 1)};
  }

  private static String field(SdkRequest r, String name) {
    try {
      return r.getValueForField(name, String.class).orElse(null);
    } catch (RuntimeException e) {
      return null;
    }
  }

  /** The bucket's union for {@code mode}, once every key is inside it ({@link GrantCheck#union}). */
  private BucketCredentials check(String bucket, List<String> keys, String mode) {
    try {
      return GrantCheck.union(conf, bucket, keys, mode);
    } catch (GatewayClient.GatewayException e) {
      throw refusal(e);
    } catch (IOException e) {
      throw S3Exception.builder().message("lakesession: " + e.getMessage()).statusCode(503).cause(e).build();
    }
  }

  private static S3Exception refusal(GatewayClient.GatewayException e) {
    String message = e.getMessage();
    int status = GrantCheck.status(e);
    return (S3Exception)
        S3Exception.builder()
            .statusCode(status)
            .message(message)
            .awsErrorDetails(
                AwsErrorDetails.builder()
                    .errorCode("AccessDenied")
                    .errorMessage(message)
                    .serviceName("S3")
                    .sdkHttpResponse(SdkHttpResponse.builder().statusCode(status).build())
                    .build())
            .build();
  }
}
